"""Persistent matrix multiply with a ts.MutTiles output.

A few blocks loop over all output tiles: `for idx in c.tiles(group=8)` hands each block
unforgeable tile indices, in a grouped order that reuses A's rows from L2, and together the
blocks cover every tile exactly once. `c.store(acc, idx)` accepts only such an index.
`deny_kernel_checks=True` promises the sizes divide by the tiles, so no access needs a mask:
the launch refuses sizes that would need one.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(deny_kernel_checks=True, preconditions=["dim(c, 0) == dim(a, 0)", "dim(c, 1) == dim(b, 1)"])
def matmul(c: ts.MutTiles["T", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
           T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa = a.partition((BM, BK))                        # tiles of A: (BM, BK)
    pb = b.partition((BK, BN))                        # tiles of B: (BK, BN)
    for idx in c.tiles(group=8):
        acc = ts.zeros((BM, BN), ts.f32)              # (BM, BN) fp32 accumulator
        for k in range(ts.num_tiles(pa, 1)):
            acc = ts.mma(pa.load((idx[0], k)), pb.load((k, idx[1])), acc)
        c.store(acc.astype(T), idx)


def main():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 64)).astype(np.float32)          # (M, K)
    B = rng.standard_normal((64, 96)).astype(np.float32)          # (K, N)
    c = ts.empty((64, 96))                                         # (M, N): 4 x 3 tiles of (16, 32)
    out = matmul.launch(c.partition((16, 32)), ts.tensor(A), ts.tensor(B), BK=16, grid=(5,)).sync()
    C = out.unpartition().numpy()
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    report = matmul.checks(ts.spec((64, 96), tile=(16, 32)), ts.spec((64, 64)), ts.spec((64, 96)), BK=16)
    print(report)                     # every access proven in bounds by the launch: no masks
    print(f"persistent_matmul: ok, 12 tiles on 5 blocks, {report.kernel} accesses masked")


if __name__ == "__main__":
    main()
