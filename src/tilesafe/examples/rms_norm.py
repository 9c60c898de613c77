"""RMSNorm over a hidden size that is not a power of two (2560).

One block per row. The row is walked in (1, SUB) pieces of a read-only view, first to sum
squares, then to write: `for j in y.subtiles((1, SUB))` mints sub-tile indices of the
block's own (1, 4096) tile, and `y.store(t, j)` writes exactly that piece. Pieces past
column 2560 read zeros and their stores are dropped. The sum of squares and the scaling are
fp32 whatever the dtype `T` of x, w and y.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(y, 0) == dim(x, 0)", "dim(y, 1) == dim(x, 1)"])   # y shaped like x
def rms_norm(y: ts.Mut["T", (1, "BH")], x: ts.Ref["T", ("M", "H")], w: ts.Ref["T", ("H",)],
             T: ts.Const[ts.DType], BH: ts.Const[int], SUB: ts.Const[int], M: int, H: int, eps: float):
    px = x.partition((1, SUB))                        # row pieces of x: (1, SUB)
    pw = w.partition((SUB,))                          # pieces of the weight: (SUB,)
    row = ts.block_id(0)
    ss = ts.zeros((1, SUB), ts.f32)                   # (1, SUB) running sum of squares
    for k in range(ts.num_tiles(px, 1)):
        t = px.load((row, k)).astype(ts.f32)          # (1, SUB)
        ss = ss + t * t
    r = ts.rsqrt(ts.sum(ss) / H + eps)                # () 1 / rms
    for j in y.subtiles((1, SUB)):
        t = px.load((row, j[1])).astype(ts.f32)       # (1, SUB)
        y.store((t * r * pw.load((j[1],)).astype(ts.f32)).astype(T), j)   # (1, SUB)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2560)).astype(np.float32)         # (M, H)
    w = rng.standard_normal(2560).astype(np.float32)               # (H,)
    y = ts.empty((3, 2560))
    out = rms_norm(y.partition((1, 4096)), ts.tensor(x), ts.tensor(w), SUB=512, eps=1e-6).sync()
    result = out.unpartition().numpy()                              # (M, H)
    ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(result, ref, rtol=1e-5, atol=1e-5)
    print(f"rms_norm: ok, 3 rows of 2560 in (1, 512) pieces, max error {np.abs(result - ref).max():.1e}")


if __name__ == "__main__":
    main()
