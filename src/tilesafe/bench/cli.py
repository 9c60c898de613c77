"""`python -m tilesafe.bench [KERNEL...] [--quick] [--out DIR]` (also `tilesafe bench ...`).

Without options: every family at full size on the GPU, the JSON written under
benchmarks/results/<gpu>/. `--dry-run` checks every implementation at tiny sizes on a
CPU backend without timing; `--plot RESULTS.json` renders PNGs next to a results file.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

EPILOG = """\
examples:
  python -m tilesafe.bench --quick --out $OUT        the quick set on the GPU (one device call)
  python -m tilesafe.bench gemm flash                two families, full size
  python -m tilesafe.bench --dry-run                 every check at tiny sizes on the CPU
  python -m tilesafe.bench --plot results.json       PNGs from a results file, on any machine
  python -m tilesafe.bench --markdown results.json   the README's summary table of a results file
  python -m tilesafe.bench --compare old.json new.json [KERNEL...]   two runs side by side
  python -m tilesafe.bench --random-shapes 12 --seed 1 --out $OUT      held-out random shapes (issue 22)
"""


def parser(prog: str = "python -m tilesafe.bench") -> argparse.ArgumentParser:
    from .families import FAMILIES
    p = argparse.ArgumentParser(prog=prog, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Benchmark tilesafe's kernel library against PyTorch and raw Triton.")
    add_arguments(p, FAMILIES)
    return p


def add_arguments(p: argparse.ArgumentParser, families) -> None:
    p.add_argument("kernels", nargs="*", metavar="KERNEL", help=f"families to run (default: all): {', '.join(families)}")
    p.add_argument("--quick", action="store_true", help="the smaller set that fits one device call (~5 min)")
    p.add_argument("--out", metavar="DIR", help="folder for the results JSON (default: benchmarks/results/<gpu>/)")
    p.add_argument("--dry-run", action="store_true", help="check every implementation at tiny sizes on a CPU "
                                                          "backend, without timing")
    p.add_argument("--backend", choices=("reference", "triton-interpreter"), help="the CPU backend of --dry-run")
    p.add_argument("--plot", metavar="RESULTS.json", help="render PNGs from a results file and exit")
    p.add_argument("--markdown", metavar="RESULTS.json", help="print a results file's summary as a Markdown table "
                                                             "(the README's) and exit")
    p.add_argument("--compare", nargs=2, metavar=("OLD.json", "NEW.json"),
                   help="print two results files side by side (times, ratios, targets) and exit")
    p.add_argument("--budget-s", type=float, metavar="S", help="start no new workload after S seconds")
    p.add_argument("--commit", help="the git commit to record (for a copy of the tree without .git)")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--random-shapes", type=int, metavar="N", help="time N GEMM shapes drawn at random from held-out "
                   "models (and a third as many GEMV and flash shapes, a quarter as many decode steps); KERNEL "
                   "then picks among gemm, gemv, flash, decode")
    p.add_argument("--seed", type=int, default=0, help="the seed of --random-shapes' draws (recorded in the results)")
    p.add_argument("--first-use-tune", action=argparse.BooleanOptionalAction, default=True,
                   help="with --random-shapes: time the config model's best few per shape on first use "
                        "(ts.kernels.first_use_tuning); --no-first-use-tune measures the model's choice alone")


def main(argv=None, prog: str = "python -m tilesafe.bench") -> int:
    from ..closed_pipe import exits_quietly
    with exits_quietly():   # `--list | head -1` ends without a traceback
        return run(parser(prog).parse_args(argv))


def run(args) -> int:
    from .families import FAMILIES
    if args.plot:
        return _plot(args.plot, args.out)
    if args.markdown:
        return _markdown(args.markdown)
    if args.random_shapes is not None:
        from .random_run import run as run_random
        return run_random(args)
    unknown = [k for k in args.kernels if k not in FAMILIES]
    if unknown:
        print(f"error: unknown kernel {', '.join(unknown)}; choose from {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    if args.compare:
        return _compare(*args.compare, args.kernels)
    selected = args.kernels or list(FAMILIES)
    import torch
    if not args.dry_run and not args.list and not torch.cuda.is_available():
        print("error: timing needs a CUDA GPU, and none is available\n  = help: run `python -m tilesafe.bench "
              "--dry-run` to check every workload on the CPU", file=sys.stderr)
        return 2
    import tilesafe as ts
    backend = (args.backend or _cpu_backend()) if args.dry_run else ts.current_backend()
    if not args.dry_run and not args.list and backend != "triton":
        print(f"error: timing runs the `triton` backend, but the backend is {backend!r}\n  = help: unset "
              "TILESAFE_BACKEND, or use --dry-run for the CPU backends", file=sys.stderr)
        return 2
    with ts.backend(backend):
        return _bench(args, selected, backend)


def _bench(args, selected, backend: str) -> int:
    import torch

    from . import machine, report
    from .cuda_timer import CudaTimer
    from .families import FAMILIES
    from .progress import Progress
    from .runner import Options, run_all, steps
    from .timing import Policy
    from .workload import Setup

    cuda = not args.dry_run and torch.cuda.is_available()
    props = torch.cuda.get_device_properties(torch.cuda.current_device()) if cuda else None
    setup = Setup(device="cuda" if cuda else "cpu", size="tiny" if args.dry_run else "quick" if args.quick else "full",
                  sms=props.multi_processor_count if props else 3)
    workloads = [w for fam in selected for w in FAMILIES[fam](setup)]
    if args.list:
        for w in workloads:
            print(f"{w.family:<9} {w.name}")
        return 0
    policy = Policy(l2_bytes=getattr(props, "L2_cache_size", 0) or Policy().l2_bytes)
    info, versions, git = machine.info(), machine.versions(), machine.git(args.commit)
    settings = {"kernels": selected, "quick": args.quick, "dry_run": args.dry_run, "size": setup.size,
                "backend": backend, "policy": policy.to_json(), "budget_s": args.budget_s, "complete": False}
    out_dir = Path(args.out) if args.out else (None if args.dry_run else _default_out(info["gpu_slug"]))
    start, names = time.monotonic(), []

    def save(results, complete=False):
        """The document of the results so far, written (under one name per run) when there is --out."""
        doc = report.document(results, info, versions, git, dict(settings, complete=complete),
                              time.monotonic() - start, selected)
        if out_dir is None:
            return doc, None
        names[:] = names or [report.file_name(doc)]
        return doc, report.write(doc, out_dir, names[0])

    progress = Progress(sum(steps(w) for w in workloads), enabled=not args.no_progress)
    timer = CudaTimer() if cuda else None
    try:
        results = run_all(workloads, timer, Options(policy, args.budget_s, save), progress)
    finally:
        progress.close()
    doc, path = save(results, complete=True)
    print(report.table(doc))
    if path is not None:
        print(f"\nresults: {path}  ({doc['elapsed_s']:.0f} s)")
    return 1 if report.broken(results) else 0


def _cpu_backend() -> str:
    import tilesafe as ts
    current = ts.current_backend()
    return current if current in ("reference", "triton-interpreter") else "reference"


def _default_out(slug: str) -> Path:
    from .machine import REPO
    root = REPO if (REPO / "benchmarks").is_dir() else Path.cwd()
    return root / "benchmarks" / "results" / slug


def _compare(old: str, new: str, kernels) -> int:
    from . import report
    from .compare import compare
    docs = []
    for path in (old, new):
        try:
            docs.append(report.load(path))
        except (OSError, ValueError) as e:
            print(f"error: cannot read {path}: {e}", file=sys.stderr)
            return 2
    print(compare(*docs, kernels))
    return 0


def _markdown(path: str) -> int:
    from . import report
    try:
        print(report.markdown(report.load(path)))
    except (OSError, ValueError) as e:
        print(f"error: cannot read {path}: {e}", file=sys.stderr)
        return 2
    return 0


def _plot(path: str, out: str | None) -> int:
    from . import report
    from .plot import MatplotlibMissing, render
    try:
        doc = report.load(path)
        paths = render(doc, Path(out) if out else Path(path).parent, Path(path).stem)
    except MatplotlibMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: cannot read {path}: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0
