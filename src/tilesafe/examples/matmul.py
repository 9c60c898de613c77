"""Tiled matrix multiply: C = A @ B with a loop over K.

Each block owns one (BM, BN) tile of C. It views A and B as grids of tiles with
`x.partition(tile)`, walks the K axis for `ts.num_tiles(pa, 1)` steps and accumulates with
`ts.mma` (tensor cores on a GPU). The sizes are ragged on purpose: edge tiles are padded
with zeros, which add nothing to the dot products. A, B and C share one dtype `T` (f32, f16
or bf16); the accumulator is fp32 and is rounded to T once, when C is stored.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(c, 0) == dim(a, 0)", "dim(c, 1) == dim(b, 1)"])   # c is (M, N)
def matmul(c: ts.Mut["T", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
           T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa = a.partition((BM, BK))                        # tiles of A: (BM, BK)
    pb = b.partition((BK, BN))                        # tiles of B: (BK, BN)
    i, j = ts.block_id(0), ts.block_id(1)
    acc = ts.zeros((BM, BN), ts.f32)                  # (BM, BN) fp32 accumulator, whatever T is
    for k in range(ts.num_tiles(pa, 1)):
        acc = ts.mma(pa.load((i, k)), pb.load((k, j)), acc)
    c.store(acc.astype(T))                            # rounded to T once, at the end


def main():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((70, 50)).astype(np.float32)          # (M, K)
    B = rng.standard_normal((50, 40)).astype(np.float32)          # (K, N)
    c = ts.empty((70, 40))                                         # (M, N)
    out = matmul(c.partition((32, 32)), ts.tensor(A), ts.tensor(B), BK=16).sync()   # grid (3, 2)
    C = out.unpartition().numpy()
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    print(f"matmul: ok, (70, 50) @ (50, 40) in a (3, 2) grid, max error {np.abs(C - A @ B).max():.1e}")


if __name__ == "__main__":
    main()
