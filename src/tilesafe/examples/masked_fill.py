"""Masked fill: y = where(mask, value, x), with the mask an input tensor.

The mask is just another read-only input, loaded tile by tile like `x`; `ts.where` picks per
element. Its dtype is a compile-time parameter (`ts.Const[ts.DType]`), so one kernel takes a
bool mask or a u8 one (nonzero means fill); so is the dtype `T` of `x` and `y` (f32, f16,
bf16). The fill value is a runtime scalar, an f32, so the pick is made in f32 and rounded to T.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(y, 0) == dim(x, 0)", "dim(y, 1) == dim(x, 1)"])   # y, x, mask: one shape
def masked_fill(y: ts.Mut["T", ("BM", "BN")], x: ts.Ref["T", ("M", "N")], mask: ts.Ref["MD", ("M", "N")],
                value: float, T: ts.Const[ts.DType], MD: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int],
                M: int, N: int):
    t = ts.load_tile_like(x, y).astype(ts.f32)        # (BM, BN), f32 like the runtime scalar `value`
    m = ts.load_tile_like(mask, y)                    # (BM, BN) bool or u8, 0 past the edges
    y.store(ts.where(m != 0, value, t).astype(T))     # (BM, BN)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 30)).astype(np.float32)          # (M, N)
    mask = rng.random((20, 30)) < 0.3                              # (M, N) bool
    ref = np.where(mask, np.float32(-1e4), x)                      # (M, N)
    for m in (mask, mask.astype(np.uint8)):
        y = ts.empty((20, 30))
        out = masked_fill(y.partition((16, 16)), ts.tensor(x), ts.tensor(m), value=-1e4).sync()   # grid (2, 2)
        np.testing.assert_array_equal(out.unpartition().numpy(), ref)
    print(f"masked_fill: ok, filled {int(mask.sum())} of {mask.size} elements with a bool and a u8 mask")


if __name__ == "__main__":
    main()
