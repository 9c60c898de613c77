"""Where a library call's host time goes on the real device: cProfile of a few host_overhead.py
cases (fresh torch views every call), eagerly and with `out=`, and the user kernel with fresh
tilesafe tensors (beside it the user's from_torch/partition/unpartition alone, three
from_torch alone, torch's three detach() under them, the launch with reused objects, and
torch tensors passed straight in with the output partitioned once, case 'user'); beside
each, µs per call with Python's garbage collector on and off (what the objects a call
allocates cost in collections).

    PYTHONPATH=src python benchmarks/host_profile.py --cases "linear M=1,add" --top 25
    PYTHONPATH=src python benchmarks/host_profile.py --device cpu --backend reference   # runs anywhere

Each case is caught on its own: an error is printed and the next case runs.
"""
import argparse
import cProfile
import gc
import io
import pstats
import time

import torch

import tilesafe as ts
from host_overhead import Fresh, cases, measure_user_kernel, scale_add, sizes  # noqa: F401


def us_per_call(fn, views: list, sync) -> float:
    sync()
    t0 = time.perf_counter()
    for v in views:
        fn(v)
    elapsed = time.perf_counter() - t0
    sync()
    return elapsed / len(views) * 1e6


def profiled(fn, views: list, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for v in views:
        fn(v)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def user_case(device):
    x, y, z = (torch.randn(4096, device=device) for _ in range(3))

    def call(t):
        p = ts.from_torch(t["z"]).partition((1024,))
        scale_add(p, ts.from_torch(t["x"]), ts.from_torch(t["y"]), 0.5)
        p.unpartition()
    return call, dict(x=x, y=y, z=z)


def user_forms(device) -> list:
    """The fresh-tensor user kernel, the user's own part of it alone (from_torch, partition,
    unpartition: no launch), and the launch with reused objects: fresh minus parts minus
    reused is what the launch pays for new objects. Beside them the parts split up: three
    from_torch alone, and torch's own floor under them (three `detach()`, the one torch call
    a borrow cannot skip: the tilesafe tensor owns its view's metadata)."""
    call, tensors = user_case(device)

    def parts(t):
        p = ts.from_torch(t["z"]).partition((1024,))
        ts.from_torch(t["x"]), ts.from_torch(t["y"])
        p.unpartition()

    def borrows(t):
        ts.from_torch(t["z"]), ts.from_torch(t["x"]), ts.from_torch(t["y"])

    def detaches(t):
        t["z"].detach(), t["x"].detach(), t["y"].detach()
    tx, ty = ts.from_torch(tensors["x"]), ts.from_torch(tensors["y"])
    tp = ts.from_torch(torch.empty_like(tensors["z"])).partition((1024,))
    tq = ts.from_torch(torch.empty_like(tensors["z"])).partition((1024,))
    return [("fresh", call, tensors), ("parts only", parts, tensors), ("from_torch x3", borrows, tensors),
            ("torch detach x3", detaches, tensors), ("reused", lambda t: scale_add(tp, tx, ty, 0.5), tensors),
            ("torch tensors in", lambda t: scale_add(tq, t["x"], t["y"], 0.5), tensors)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--backend", default=None)
    ap.add_argument("--cases", default="linear M=1,add,rms_norm", help="host_overhead.py case names, and 'user'")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    device = a.device
    backend = a.backend or ("triton" if device == "cuda" else "reference")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    wanted = a.cases.split(",")
    table = []
    with ts.backend(backend), torch.no_grad():
        found = {c.name: c for c in cases(sizes(device != "cuda"), device, dtype)}
        for name in wanted:
            try:
                if name == "user":
                    forms = user_forms(device)
                else:
                    c = found[name]
                    forms = [("eager", c.library, c.tensors), ("out=", c.library_out, c.tensors)]
                for form, fn, tensors in forms:
                    fresh = Fresh(tensors, 200 + 3 * a.calls)
                    for _ in range(200):
                        fn(fresh.next())
                    sync()
                    on = us_per_call(fn, [fresh.next() for _ in range(a.calls)], sync)
                    gc.disable()
                    try:
                        off = us_per_call(fn, [fresh.next() for _ in range(a.calls)], sync)
                    finally:
                        gc.enable()
                    text = profiled(fn, [fresh.next() for _ in range(a.calls)], a.top)
                    sync()
                    print(f"== {name} ({form}): {on:.1f} us per call, {off:.1f} with gc off\n{text}", flush=True)
                    table.append((f"{name} ({form})", on, off))
            except Exception as e:                      # noqa: BLE001 - a probe reports and goes on
                print(f"== {name}: FAILED {type(e).__name__}: {e}", flush=True)
    print(f"{'call':24s} {'us':>8s} {'gc off':>8s}")
    for name, on, off in table:
        print(f"{name:24s} {on:8.1f} {off:8.1f}")


if __name__ == "__main__":
    main()
