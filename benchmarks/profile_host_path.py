"""Host cost of launches and library calls with the device work replaced by a no-op.

Runs on any machine (no GPU): the final step that would run the kernel is stubbed out in
this script only — Triton's launch under the `triton-interpreter` backend, the NumPy
interpreter on the `reference` backend — so what is timed is tilesafe's host path:
argument checks, binding, aliasing and initialisation checks, specialization lookup,
partitioning, ordering bookkeeping. (On a GPU the `triton` backend also records CUDA
events; that part is not here.)

    PYTHONPATH=src python benchmarks/profile_host_path.py            # µs per call, both backends
    PYTHONPATH=src python benchmarks/profile_host_path.py --profile add   # cProfile one case
"""

import argparse
import cProfile
import pstats
import time

import torch

import tilesafe as ts
from tilesafe import kernels
from tilesafe.backends.reference import interpreter
from tilesafe.backends.triton import adapter


@ts.kernel
def add3(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


def stub_device_work() -> None:
    """Make the device step free: the host path is all that is left to time."""
    interpreter.run = lambda *a, **k: None
    adapter.launch = lambda *a, **k: None


def cases() -> dict:
    """name -> a zero-argument call, as a user makes it (fresh torch tensors in where noted)."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.rand(*s, generator=g)   # noqa: E731
    x4k, z4k, y4k = r(4096), r(4096), r(4096)
    tx, ty = ts.rand(4096, seed=1), ts.rand(4096, seed=2)
    tp = ts.empty(4096).partition((1024,))
    row, a, b = r(1, 4096), r(64, 256), r(256, 128)
    w, x1 = r(512, 4096), r(1, 4096)
    h, nw = r(4, 1024), r(1024)

    def user_fresh():
        p = ts.from_torch(z4k).partition((1024,))
        add3(p, ts.from_torch(x4k), ts.from_torch(y4k))
        p.unpartition()

    return {
        "user kernel, fresh ts tensors from torch": user_fresh,
        "user kernel, reused objects": lambda: add3(tp, tx, ty),
        "kernels.add(x, x) 1x4096": lambda: kernels.add(row, row),
        "kernels.linear(x, w) M=1 4096->512": lambda: kernels.linear(x1, w),
        "kernels.matmul(a, b) 64x256 @ 256x128": lambda: kernels.matmul(a, b),
        "kernels.rms_norm(h, w) 4x1024": lambda: kernels.rms_norm(h, nw),
    }


def us_per_call(fn, calls: int, repeats: int = 7, warmup: int = 20) -> float:
    """The fastest of `repeats` rounds: on a shared machine other work only ever adds time."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return min(samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--backend", default=None, help="reference or triton-interpreter (default: both)")
    ap.add_argument("--profile", default=None, help="a substring of a case name: cProfile that case")
    ap.add_argument("--top", type=int, default=25)
    opts = ap.parse_args()
    stub_device_work()
    backends = [opts.backend] if opts.backend else ["reference", "triton-interpreter"]
    for backend in backends:
        with ts.backend(backend):
            for name, fn in cases().items():
                if opts.profile is not None:
                    if opts.profile not in name:
                        continue
                    for _ in range(20):
                        fn()
                    prof = cProfile.Profile()
                    prof.enable()
                    for _ in range(opts.calls):
                        fn()
                    prof.disable()
                    print(f"== {backend}: {name}")
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(opts.top)
                    pstats.Stats(prof).sort_stats("tottime").print_stats(opts.top)
                    continue
                print(f"{backend:20s} {name:42s} {us_per_call(fn, opts.calls):8.1f} us")


if __name__ == "__main__":
    main()
