"""`python -m tilesafe.bench --random-shapes N --seed S [gemm gemv flash decode]`: a run of
shapes drawn at random from held-out models (families/random_shapes.py).

Every shape is checked against the fp32 oracle first, then timed side by side with PyTorch:
in CUDA graphs (so host cost stays out of the ratio) and eagerly beside it. The first
library call of each shape runs inside `first_use_tuning()` unless `--no-first-use-tune`,
so the run measures what a program that opts in gets; the results record which config ran
(the model's or the autotune's), its predicted time and limit, the seed and the generator.
"""
from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

SAMPLE_MS = 100.0                    # GPU time per measurement: two modes x ~25 shapes fit ~5 min


def run(args) -> int:
    from .families.random_workloads import FAMILIES
    unknown = [k for k in args.kernels if k not in FAMILIES]
    if unknown:
        print(f"error: --random-shapes draws {', '.join(FAMILIES)}; not {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.random_shapes < 1:
        print("error: --random-shapes needs a count of at least 1", file=sys.stderr)
        return 2
    import torch

    import tilesafe as ts
    if not args.dry_run and not args.list and not torch.cuda.is_available():
        print("error: timing needs a CUDA GPU, and none is available\n  = help: add --dry-run to check the draws "
              "on the CPU", file=sys.stderr)
        return 2
    backend = (args.backend or "reference") if args.dry_run else ts.current_backend()
    with ts.backend(backend):
        return _run(args, tuple(args.kernels) or FAMILIES, backend)


def _run(args, families, backend: str) -> int:
    import torch

    from ..kernels.first_use import first_use_tuning
    from . import machine, random_report, report
    from .cuda_timer import CudaTimer
    from .families.random_shapes import GENERATOR
    from .families.random_workloads import counts, random_workloads
    from .progress import Progress
    from .runner import Options, run_all, steps
    from .timing import Policy
    from .workload import Setup

    cuda = not args.dry_run and torch.cuda.is_available()
    props = torch.cuda.get_device_properties(torch.cuda.current_device()) if cuda else None
    setup = Setup(device="cuda" if cuda else "cpu", size="tiny" if args.dry_run else "full",
                  sms=props.multi_processor_count if props else 3)
    workloads = random_workloads(setup, args.random_shapes, args.seed, families)
    if args.list:
        for w in workloads:
            print(f"{w.family:<14} {w.name}")
        return 0
    policy = Policy(l2_bytes=getattr(props, "L2_cache_size", 0) or Policy().l2_bytes,
                    graph_below_us=1e9, sample_ms=SAMPLE_MS)
    info, versions, git = machine.info(), machine.versions(), machine.git(args.commit)
    tune = cuda and args.first_use_tune
    settings = {"kernels": [f"random-{f}" for f in families], "size": setup.size, "dry_run": args.dry_run,
                "backend": backend, "policy": policy.to_json(), "budget_s": args.budget_s, "complete": False,
                "random": {"seed": args.seed, "n": args.random_shapes, "generator": GENERATOR,
                           "counts": {f: c for f, c in counts(args.random_shapes).items() if f in families},
                           "first_use_tune": tune}}
    out_dir = Path(args.out) if args.out else None
    start, names = time.monotonic(), []

    def save(results, complete=False):
        for rec in results:
            if "model" not in rec and "params" in rec:
                rec["model"] = random_report.model_record(rec["params"], cuda)
        doc = report.document(results, info, versions, git, dict(settings, complete=complete),
                              time.monotonic() - start, settings["kernels"])
        # The fixed benchmark's targets (a raw Triton twin per kernel, the tuned shapes) do not
        # apply to drawn shapes, which have no twins: issue 22's goals judge them (random_summary)
        doc["targets"] = []
        doc["random_summary"] = random_report.summarize(doc["results"])
        if out_dir is None:
            return doc, None
        names[:] = names or [report.file_name(doc).replace("-full", "").replace(".json", "-random.json")]
        return doc, report.write(doc, out_dir, names[0])

    progress = Progress(sum(steps(w) for w in workloads), enabled=not args.no_progress)
    options = Options(policy, args.budget_s, save, eager_too=cuda)
    try:
        with first_use_tuning(tune) if tune else contextlib.nullcontext():
            results = run_all(workloads, CudaTimer() if cuda else None, options, progress)
    finally:
        progress.close()
    doc, path = save(results, complete=True)
    print(report.table(doc))
    print(random_report.text(doc["random_summary"]))
    if path is not None:
        print(f"\nresults: {path}  ({doc['elapsed_s']:.0f} s)")
        for png in _plots(doc, path):
            print(png)
    return 1 if report.broken(results) else 0


def _plots(doc: dict, path: Path) -> list:
    """The family bar charts and the predicted-vs-measured chart beside the JSON (none
    without matplotlib: `--plot` renders the bars later on any machine)."""
    from . import random_report
    from .plot import MatplotlibMissing, render
    if doc["settings"].get("dry_run"):
        return []
    try:
        return render(doc, path.parent, path.stem) + random_report.plot(doc, path.parent, path.stem)
    except MatplotlibMissing as e:
        print(f"note: {e}")
        return []

