"""Host µs per library call on the Qwen3 path, on any machine, with the device work stubbed out.

The calls are host_overhead.py's cases at its smoke sizes (fresh torch views every call, as
a user has them), eagerly and with `out=`; the step that would run a kernel is a no-op
(profile_host_path.stub_device_work), so what is timed is tilesafe's host path alone. It is
the CPU stand-in for the H200 benchmark: compare runs of it before and after a change to
the launch path (the machine is shared, so compare within one run or take the minimum).

    cd benchmarks && PYTHONPATH=../src python host_path_calls.py                 # reference backend
    cd benchmarks && PYTHONPATH=../src python host_path_calls.py --profile rope  # cProfile one call
"""
import argparse
import cProfile
import pstats
import time

import torch

import tilesafe as ts
from host_overhead import Fresh, cases, sizes
from profile_host_path import stub_device_work


def us_per_call(fn, tensors: dict, calls: int, repeats: int, warmup: int = 20) -> float:
    """The fastest of `repeats` rounds of `calls` calls (after `warmup` calls), each with new views
    (made before the clock)."""
    fresh = Fresh(tensors, warmup + calls * repeats)
    for _ in range(warmup):
        fn(fresh.next())
    best = float("inf")
    for _ in range(repeats):
        views = [fresh.next() for _ in range(calls)]
        t0 = time.process_time()
        for v in views:
            fn(v)
        best = min(best, (time.process_time() - t0) / calls * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", help="comma-separated substrings of call names (default: all)")
    ap.add_argument("--profile", help="a substring of a call name: cProfile its out= form")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    stub_device_work()
    with ts.backend(a.backend), torch.no_grad():
        for c in cases(sizes(True), "cpu", torch.float32):
            if a.cases and not any(s in c.name for s in a.cases.split(",")):
                continue
            if a.profile is not None:
                if a.profile in c.name:
                    profile(c, a.calls, a.top)
                continue
            eager = us_per_call(c.library, c.tensors, a.calls, a.repeats)
            out = us_per_call(c.library_out, c.tensors, a.calls, a.repeats)
            print(f"{c.name:22s} {eager:8.1f} us {out:8.1f} us (out=)", flush=True)


def profile(c, calls: int, top: int) -> None:
    fresh = Fresh(c.tensors, 20 + calls)
    for _ in range(20):
        c.library_out(fresh.next())
    views = [fresh.next() for _ in range(calls)]
    prof = cProfile.Profile()
    prof.enable()
    for v in views:
        c.library_out(v)
    prof.disable()
    print(f"== {c.name} (out=)")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    main()
