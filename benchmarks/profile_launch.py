"""Where a repeated safe launch spends its host time: cProfile over many back-to-back
launches of a 1-block kernel (run on a GPU: `PYTHONPATH=src python benchmarks/profile_launch.py`)."""
import cProfile
import pstats

import torch

import tilesafe as ts


@ts.kernel
def add3(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


def main(calls: int = 20000) -> None:
    x, y = ts.rand(1024, seed=1), ts.rand(1024, seed=2)
    p = ts.empty(1024).partition((1024,))
    for _ in range(200):
        add3(p, x, y)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        add3(p, x, y)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
