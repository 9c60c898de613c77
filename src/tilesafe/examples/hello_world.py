"""Hello, tilesafe: the smallest kernel.

Each block of the launch owns one tile of the output `y` (a `ts.Mut`) and writes twice the
matching tile of the read-only input `x` (a `ts.Ref`). The grid is inferred from the
partition: 64 elements in tiles of 16 make 4 blocks. The element dtype `T` is a compile-time
parameter bound from the arguments, so the same kernel doubles f32, f16 or bf16 data.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(y, 0) == dim(x, 0)"])   # y as long as x
def double(y: ts.Mut["T", (16,)], x: ts.Ref["T", ("N",)], T: ts.Const[ts.DType], N: int):
    y.store(2.0 * ts.load_tile_like(x, y))   # (16,)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64).astype(np.float32)                 # (64,)
    py = ts.empty(64).partition((16,))                               # 4 tiles of (16,)
    out = double(py, ts.tensor(x)).sync().unpartition().numpy()      # (64,)
    np.testing.assert_array_equal(out, 2.0 * x)
    print(f"hello_world: ok, doubled {out.size} elements in 4 blocks")


if __name__ == "__main__":
    main()
