"""Row softmax over ragged rows.

Each block owns one row of the output, as a (1, BN) tile with BN the next power of two
above the row length. The row is loaded with `padding=-inf`, so the padding cannot win the
max and adds exp(-inf) = 0 to the sum: padding is semantics, not a check. Whatever the
dtype `T` of x and y, the row is computed in fp32 and rounded to T when stored.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(y, 0) == dim(x, 0)", "dim(y, 1) == dim(x, 1)"])   # y shaped like x
def softmax(y: ts.Mut["T", (1, "BN")], x: ts.Ref["T", ("M", "N")], T: ts.Const[ts.DType], BN: ts.Const[int],
            M: int, N: int):
    t = ts.load_tile_like(x, y, padding=-float("inf")).astype(ts.f32)   # (1, BN), -inf past column N
    m = ts.max(t, axis=1, keepdims=True)                  # (1, 1)
    e = ts.exp(t - m)                                     # (1, BN)
    y.store((e / ts.sum(e, axis=1, keepdims=True)).astype(T))   # (1, BN)


def main():
    rng = np.random.default_rng(0)
    x = 3.0 * rng.standard_normal((6, 100)).astype(np.float32)    # (M, N): rows of 100 in tiles of 128
    y = ts.empty((6, 100))
    out = softmax(y.partition((1, 128)), ts.tensor(x)).sync().unpartition().numpy()   # grid (6, 1)
    e = np.exp(x - x.max(axis=1, keepdims=True))                   # (M, N)
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)
    print(f"softmax: ok, 6 rows of 100 in (1, 128) tiles, rows sum to {out.sum(axis=1).min():.6f}..{out.sum(axis=1).max():.6f}")


if __name__ == "__main__":
    main()
