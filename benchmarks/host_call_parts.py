"""Where a library call's host time goes on the device, by parts that can be timed alone.

For a few host_overhead.py cases (fresh torch views every call), side by side in one run
(host_timing.host_us_side_by_side): the call eagerly and with `out=`; both again with the
fast form's Triton start stubbed (each PlannedLaunch's `start` a no-op: tilesafe's own host
work alone); Triton's C launch alone (the last call's argument tuple started again);
`torch.empty` of the result dropped at once (what allocating costs; also with the device
made once, as a plan's hit passes it, and as `new_empty` of an argument) and the same with its
storage state attached as an eager call attaches it (`StorageState.attach_new`); the plan
key alone (`call_plans.call_key`); and the eager call with Python's garbage collector off.

    PYTHONPATH=src python benchmarks/host_call_parts.py                   # H200
    PYTHONPATH=src python benchmarks/host_call_parts.py --device cpu      # runs anywhere (no C launch)

Each case is caught on its own: an error is printed and the next case runs. A table last.
"""
import argparse
import gc
import sys
import time

import torch

import tilesafe as ts
from host_overhead import Fresh, cases, sizes
from host_timing import host_us_side_by_side
from tilesafe.kernels import call_plans
from tilesafe.runtime.storage_state import StorageState

NAMES = {"linear M=1": "linear", "add": "add", "rms_norm": "rms_norm", "embedding": "embedding",
         "silu_mul": "silu_mul", "decode_attention": "decode_attention", "rms_norm + residual": "rms_norm"}


def launches() -> list:
    """The fast-form launches (PlannedLaunch) of every library call plan made so far (every
    PlanCache of tilesafe.kernels' modules, as host_path_hits.forget_plans finds them)."""
    found = []
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("tilesafe.kernels"):
            continue
        for v in list(vars(mod).values()):
            cache = v if isinstance(v, call_plans.PlanCache) else getattr(v, "plans", None)
            if isinstance(cache, call_plans.PlanCache):
                for plan in cache.plans.values():
                    if getattr(plan, "hit", None):
                        found += [pl for pl in plan.hit.launches if pl is not None and pl not in found]
    return found


def measure(c, device, calls: int, repeats: int) -> dict:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    count = 200 + calls * repeats
    for _ in range(5):
        c.library(c.tensors), c.library_out(c.tensors)
    sync()
    result = c.library(c.tensors)
    results = result if isinstance(result, tuple) else (result,)
    shapes = [(r.shape, r.dtype) for r in results]
    pls = launches()
    real_starts = [(pl, pl.start) for pl in pls if getattr(pl, "mode", None) == 2]   # planned_launch._GPU
    captured = []
    for pl, s in real_starts:          # the out= call's argument tuples, with their real start
        pl.start = (lambda stream, args, s=s: (captured.append((s, stream, args)), s(stream, args)))
    c.library_out(c.tensors)
    for pl, s in real_starts:
        pl.start = s
    sync()

    def stubbed(fn):
        def call(t):
            for pl, _ in real_starts:
                pl.start = _noop
            try:
                return fn(t)
            finally:
                for pl, s in real_starts:
                    pl.start = s
        return call

    def alloc(t):
        for shape, dtype in shapes:
            torch.empty(shape, dtype=dtype, device=device)

    dev, first = torch.device(device), next(iter(c.tensors.values()))

    def alloc_dev(t):              # as a plan's hit allocates: a torch.device made once
        for shape, dtype in shapes:
            torch.empty(shape, dtype=dtype, device=dev)

    def alloc_new(t):              # from an argument: its device and the dtype given
        for shape, dtype in shapes:
            first.new_empty(shape, dtype=dtype)

    def alloc_attach(t):
        for shape, dtype in shapes:
            x = torch.empty(shape, dtype=dtype, device=device)
            s = x.untyped_storage()
            StorageState.attach_new(s, s.nbytes(), x.data_ptr())

    name = NAMES.get(c.name, c.name)
    args_of = _key_args(c)

    def key(t):
        a, kw = args_of(t)
        call_plans.call_key(name, a, kw)

    def gc_off(t):
        gc.disable()
        try:
            return c.library(t)
        finally:
            gc.enable()
    fns = {"eager": c.library, "out=": c.library_out, "eager, start stubbed": stubbed(c.library),
           "out=, start stubbed": stubbed(c.library_out), "alloc": alloc, "alloc, device made": alloc_dev,
           "alloc, new_empty": alloc_new, "alloc+attach": alloc_attach,
           "call_key (eager)": key}
    if captured:
        def c_launch(t):
            for s, stream, args in captured:
                s(stream, args)
        fns["C launches alone"] = c_launch
    bound = {}
    for k, f in fns.items():
        fr = Fresh(c.tensors, count)
        bound[k] = (lambda f=f, fr=fr: f(fr.next()))
    out = host_us_side_by_side(bound, calls, repeats, 200, sync)
    # gc off: a separate row (a long run of it would change the others' collections)
    fr = Fresh(c.tensors, 200 + calls * repeats)
    out["eager, gc off"] = host_us_side_by_side({"x": lambda: gc_off(fr.next())}, calls, repeats, 200, sync)["x"]
    out["launches"] = len(pls)
    print(f"  {c.name}: launches {[_kind(pl) for pl in pls]}", flush=True)
    return out


def _kind(pl) -> str:
    """How a fast launch starts: its mode, argument count, TMA descriptors, and whether
    Triton's C launch is called directly (adapter.direct_launcher's c_run) or its launcher's
    Python `run` (scratch memory, hooks)."""
    start = getattr(pl, "start", None)
    cells = dict(zip(getattr(getattr(start, "__code__", None), "co_freevars", ()),
                     [c.cell_contents for c in (getattr(start, "__closure__", None) or ())]))
    direct = "c_run" if cells.get("c_run") is not None else ("run" if "run" in cells else "?")
    values = getattr(pl, "values", ())
    return f"mode {pl.mode} args {len(values) if values else '-'} desc {len(getattr(pl, 'descriptors', ()) or ())} {direct}"


def _noop(stream, args):
    return None


def _key_args(c):
    """(args, kwargs) of the eager call as call_key sees them (host_overhead's lambdas, read)."""
    spec = {"linear M=1": lambda t: ((t["x"], t["w"]), {}),
            "add": lambda t: ((t["x"], t["y"]), {}),
            "rms_norm": lambda t: ((t["x"], t["w"]), {}),
            "embedding": lambda t: ((t["ids"], t["table"]), {}),
            "silu_mul": lambda t: ((t["g"], t["u"]), {}),
            "decode_attention": lambda t: ((t["q"], t["k"], t["v"], t["n"]), {})}
    return spec.get(c.name, lambda t: ((), {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--cases", default="linear M=1,add,rms_norm,silu_mul,embedding,decode_attention")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    device = a.device
    backend = "triton" if device == "cuda" else "reference"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    rows = {}
    started = time.perf_counter()
    with ts.backend(backend), torch.no_grad():
        found = {c.name: c for c in cases(sizes(device != "cuda"), device, dtype)}
        for name in a.cases.split(","):
            try:
                rows[name] = measure(found[name], device, a.calls, a.repeats)
                print(name, {k: round(v, 2) for k, v in rows[name].items()}, flush=True)
            except Exception as e:                      # noqa: BLE001 - a probe reports and goes on
                print(f"== {name}: FAILED {type(e).__name__}: {e}", flush=True)
    cols = ["eager", "out=", "eager, start stubbed", "out=, start stubbed", "C launches alone", "alloc",
            "alloc, device made", "alloc, new_empty", "alloc+attach", "call_key (eager)", "eager, gc off"]
    print(f"\nhost µs per call ({device}, {time.perf_counter() - started:.0f} s)")
    print(f"{'call':18s}" + "".join(f"{c[:13]:>14s}" for c in cols))
    for name, r in rows.items():
        print(f"{name:18s}" + "".join(f"{r[c]:14.1f}" if c in r else f"{'-':>14s}" for c in cols))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
