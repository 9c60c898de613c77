"""Masked fill: y = where(mask, value, x), with the mask an input bool tensor.

The mask is just another read-only input, loaded tile by tile like `x`; `ts.where` picks
per element. The fill value is a runtime scalar, so changing it does not recompile.
"""
import numpy as np

import tilesafe as ts


@ts.kernel
def masked_fill(y: ts.Mut[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], mask: ts.Ref[ts.bool_, ("M", "N")],
                value: float, BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    t = ts.load_tile_like(x, y)                       # (BM, BN)
    m = ts.load_tile_like(mask, y)                    # (BM, BN) bool, False past the edges
    y.store(ts.where(m, value, t))                    # (BM, BN)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 30)).astype(np.float32)          # (M, N)
    mask = rng.random((20, 30)) < 0.3                              # (M, N) bool
    y = ts.empty((20, 30))
    out = masked_fill(y.partition((16, 16)), ts.tensor(x), ts.tensor(mask), value=-1e4).sync()   # grid (2, 2)
    result = out.unpartition().numpy()
    np.testing.assert_array_equal(result, np.where(mask, np.float32(-1e4), x))
    print(f"masked_fill: ok, filled {int(mask.sum())} of {mask.size} elements")


if __name__ == "__main__":
    main()
