"""Mixed-precision matrix multiply: bf16 or f16 inputs, fp32 accumulator, fp32 output.

The inputs' dtype is a compile-time parameter `T`, bound from A and B (which must agree);
the output stays fp32. `ts.mma` of bf16 or f16 tiles accumulates in fp32 (as tensor cores
do), so the only rounding is the inputs' own. The NumPy check multiplies the same values in fp32.
"""
import ml_dtypes
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(c, 0) == dim(a, 0)", "dim(c, 1) == dim(b, 1)"])   # c is (M, N)
def matmul(c: ts.Mut[ts.f32, ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
           T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa = a.partition((BM, BK))                        # T tiles of A: (BM, BK)
    pb = b.partition((BK, BN))                        # T tiles of B: (BK, BN)
    i, j = ts.block_id(0), ts.block_id(1)
    acc = ts.zeros((BM, BN), ts.f32)                  # (BM, BN) fp32 accumulator
    for k in range(ts.num_tiles(pa, 1)):
        acc = ts.mma(pa.load((i, k)), pb.load((k, j)), acc)
    c.store(acc)


def main():
    for name, dtype in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        rng = np.random.default_rng(0)
        A = rng.standard_normal((64, 96)).astype(dtype)            # (M, K) f16 or bf16
        B = rng.standard_normal((96, 48)).astype(dtype)            # (K, N)
        c = ts.empty((64, 48), ts.f32)                             # (M, N) fp32
        out = matmul(c.partition((32, 32)), ts.tensor(A), ts.tensor(B), BK=32).sync()   # grid (2, 2), T inferred
        C = out.unpartition().numpy()
        ref = A.astype(np.float32) @ B.astype(np.float32)          # (M, N) fp32
        np.testing.assert_allclose(C, ref, rtol=1e-4, atol=1e-4)
        print(f"mixed_precision_matmul: ok, {name} (64, 96) @ (96, 48) -> f32, max error {np.abs(C - ref).max():.1e}")


if __name__ == "__main__":
    main()
