"""SAXPY in two dimensions, in place: y = a * x + y.

"In place" in tilesafe means the output is also read: each block reads back its own tile of
`y` with `y.load()` and stores the new values over it. That is safe because `y` is
partitioned, so no other block can touch that tile. `a` is a runtime scalar (a plain `float`,
an f32 on the device), so the tiles of any float dtype `T` are computed in f32 and rounded back.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(y, 0) == dim(x, 0)", "dim(y, 1) == dim(x, 1)"])   # y shaped like x
def saxpy(y: ts.Mut["T", ("BM", "BN")], x: ts.Ref["T", ("M", "N")], a: float,
          T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    t = a * ts.load_tile_like(x, y).astype(ts.f32) + y.load().astype(ts.f32)   # (BM, BN) in f32, as `a` is
    y.store(t.astype(T))


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 80)).astype(np.float32)           # (48, 80)
    y0 = rng.standard_normal((48, 80)).astype(np.float32)          # (48, 80)
    y = ts.tensor(y0)
    out = saxpy(y.partition((32, 64)), ts.tensor(x), a=1.5).sync()  # grid (2, 2)
    result = out.unpartition().numpy()                              # (48, 80), y's own storage
    np.testing.assert_allclose(result, np.float32(1.5) * x + y0, rtol=1e-6, atol=1e-6)
    print(f"saxpy_2d: ok, y = 1.5 * x + y in place over {result.shape} in a (2, 2) grid")


if __name__ == "__main__":
    main()
