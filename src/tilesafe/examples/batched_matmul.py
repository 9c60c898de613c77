"""Batched matrix multiply: C[b] = A[b] @ B[b].

The output tile is rank 3, (1, BM, BN), so the grid has one axis per batch, row and column
tile. Each block loads (1, BM, BK) and (1, BK, BN) tiles of A and B, drops the batch axis
with `ts.reshape` to multiply 2-D tiles with `ts.mma`, and reshapes the result back.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(c, 0) == dim(a, 0)", "dim(c, 1) == dim(a, 1)", "dim(c, 2) == dim(b, 2)"])
def bmm(c: ts.Mut["T", (1, "BM", "BN")], a: ts.Ref["T", ("Z", "M", "K")], b: ts.Ref["T", ("Z", "K", "N")],
        T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], Z: int, M: int, N: int, K: int):
    pa = a.partition((1, BM, BK))                     # tiles of A: (1, BM, BK)
    pb = b.partition((1, BK, BN))                     # tiles of B: (1, BK, BN)
    z, i, j = ts.block_id(0), ts.block_id(1), ts.block_id(2)
    acc = ts.zeros((BM, BN), ts.f32)                  # (BM, BN) fp32 accumulator
    for k in range(ts.num_tiles(pa, 2)):
        ta = ts.reshape(pa.load((z, i, k)), (BM, BK))   # (BM, BK)
        tb = ts.reshape(pb.load((z, k, j)), (BK, BN))   # (BK, BN)
        acc = ts.mma(ta, tb, acc)
    c.store(ts.reshape(acc, (1, BM, BN)).astype(T))   # (1, BM, BN) in T


def main():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 40, 48)).astype(np.float32)       # (Z, M, K)
    B = rng.standard_normal((3, 48, 24)).astype(np.float32)       # (Z, K, N)
    c = ts.empty((3, 40, 24))                                      # (Z, M, N)
    out = bmm(c.partition((1, 32, 32)), ts.tensor(A), ts.tensor(B), BK=16).sync()   # grid (3, 2, 1)
    C = out.unpartition().numpy()
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    print("batched_matmul: ok, 3 x (40, 48) @ (48, 24) in a (3, 2, 1) grid")


if __name__ == "__main__":
    main()
