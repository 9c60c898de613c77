"""Ragged sizes: extents that do not divide by the tile.

Tiles are powers of two but tensors are not: 1000 elements in tiles of 128 leave a last
tile of 104, a prime length like 997 never divides, and a 2-D tensor can be ragged on both
axes. Edge loads are padded and edge stores masked, so the same kernel is correct for every
size; when the sizes do divide, the launch proves it and drops the masks (`kernel.checks`).
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(y, 0) == dim(x, 0)"])
def square_plus_one(y: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], T: ts.Const[ts.DType], B: ts.Const[int],
                    N: int):
    t = ts.load_tile_like(x, y)                       # (B,), zeros past N
    y.store(t * t + 1.0)                              # elements past N are not written


@ts.kernel(preconditions=["dim(z, 0) == dim(x, 0)", "dim(z, 1) == dim(x, 1)"])   # z shaped like x and y
def add_2d(z: ts.Mut["T", ("BM", "BN")], x: ts.Ref["T", ("M", "N")], y: ts.Ref["T", ("M", "N")],
           T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))   # (BM, BN)


def main():
    rng = np.random.default_rng(0)
    for n in (1000, 997, 1024):
        x = rng.standard_normal(n).astype(np.float32)              # (n,)
        out = square_plus_one(ts.empty(n).partition((128,)), ts.tensor(x)).sync().unpartition()
        np.testing.assert_allclose(out.numpy(), x * x + 1.0, rtol=1e-6)
        masked = square_plus_one.checks(ts.spec(n, tile=128), ts.spec(n)).kernel
        print(f"ragged_sizes: ok, n={n} in tiles of 128 ({-(-n // 128)} blocks, {masked} masked accesses)")
    # The masked stores never touch memory past the tensor: 997 elements of a 1024 buffer.
    buf = ts.full(1024, -7.0)                                       # (1024,)
    x = rng.standard_normal(997).astype(np.float32)                # (997,)
    square_plus_one(buf[:997].partition((128,)), ts.tensor(x)).sync().unpartition()
    np.testing.assert_array_equal(buf.numpy()[997:], -7.0)
    print("ragged_sizes: ok, the 27 elements after a 997-element view are untouched")
    x = rng.standard_normal((33, 47)).astype(np.float32)           # (M, N): ragged on both axes
    y = rng.standard_normal((33, 47)).astype(np.float32)           # (M, N)
    out = add_2d(ts.empty((33, 47)).partition((16, 16)), ts.tensor(x), ts.tensor(y)).sync()   # grid (3, 3)
    np.testing.assert_array_equal(out.unpartition().numpy(), x + y)
    print("ragged_sizes: ok, (33, 47) in (16, 16) tiles, a (3, 3) grid with ragged edges on both axes")
    print("ragged_sizes: ok, 1000, 997, 1024 and (33, 47) elements, nothing written past the edges")


if __name__ == "__main__":
    main()
