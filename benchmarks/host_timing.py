"""Host time per call, shared by the host-side benchmarks (launch_overhead.py, host_overhead.py).

Each function is called `calls` times in a row with the clock around the whole row, and the
device is synchronised only after the row stops the clock: what is timed is the host's work
to issue the calls while the GPU keeps up (shapes are chosen so its kernels are short).
"""
import statistics
import time


def cuda_sync() -> None:
    import torch
    torch.cuda.synchronize()


def host_us_per_call(fn, calls=3000, repeats=5, warmup=200, sync=cuda_sync) -> float:
    return host_us_side_by_side({"fn": fn}, calls, repeats, warmup, sync)["fn"]


def host_us_side_by_side(fns: dict, calls=3000, repeats=7, warmup=200, sync=cuda_sync) -> dict:
    """Median host µs per call of each function, measured in alternating rounds so that a
    drift of the host's speed during the run hits every function alike. Each function is
    called `warmup + repeats * calls` times in all."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls * 1e6)
            sync()
    return {name: statistics.median(v) for name, v in samples.items()}
