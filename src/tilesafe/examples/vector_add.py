"""Vector add, the tour example: z = x + y.

`z` is partitioned into tiles of `B` elements; each block loads the tiles of `x` and `y` at
its own position (`ts.load_tile_like`) and stores their sum. 1000 is not a multiple of 128,
so the last block's loads are padded and its store is masked: the bounds report says so.
One dtype parameter `T` types all three tensors: f32 here, f16 or bf16 alike, never mixed.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(z, 0) == dim(x, 0)"])   # z as long as x (and y: both are N)
def add(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)],
        T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))   # (B,)


def main():
    rng = np.random.default_rng(0)
    x = rng.random(1000, dtype=np.float32)                         # (1000,)
    y = rng.random(1000, dtype=np.float32)                         # (1000,)
    z = ts.empty(1000)
    pz = z.partition((128,))                                       # grid (8,): B=128, N=1000 inferred
    out = add(pz, ts.tensor(x), ts.tensor(y)).sync().unpartition()  # the same storage as z
    np.testing.assert_array_equal(out.numpy(), x + y)
    report = add.checks(ts.spec(1000, tile=128), ts.spec(1000), ts.spec(1000))
    print(report)                     # 1000 % 128 != 0: the loads and the store are masked
    print(f"vector_add: ok, 1000 elements in 8 blocks, {report.kernel} accesses masked at the ragged edge")


if __name__ == "__main__":
    main()
