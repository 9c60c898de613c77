"""Unsafe kernels, and the sanitizer that catches their races.

Raw pointers and atomics exist only in `@ts.kernel(unsafe=True)` kernels, launched with
`kernel.unsafe_launch(..., grid=...)`. tilesafe cannot prove such a kernel safe, so the
reference backend always runs it under a sanitizer that records every block's reads and
writes. Here each block adds its chunk's sum into `total[0]`: a plain store races, an atomic does not.
"""
import numpy as np

import tilesafe as ts


@ts.kernel(unsafe=True)
def racy_sum(total: ts.Ptr[ts.f32], x: ts.Ptr[ts.f32], n: int, B: ts.Const[int]):
    offs = ts.block_id(0) * B + ts.arange(0, B)               # (B,)
    part = ts.sum(ts.load_ptr(x, offs, mask=offs < n))        # () this block's partial sum
    ts.store_ptr(total, ts.zeros((1,), ts.i32), part)         # every block writes element 0: a race


@ts.kernel(unsafe=True)
def atomic_sum(total: ts.Ptr[ts.f32], x: ts.Ptr[ts.f32], n: int, B: ts.Const[int]):
    offs = ts.block_id(0) * B + ts.arange(0, B)               # (B,)
    part = ts.sum(ts.load_ptr(x, offs, mask=offs < n))        # ()
    ts.atomic_add(total, ts.zeros((1,), ts.i32), part)        # the blocks' additions do not interfere


def main():
    rng = np.random.default_rng(0)
    x = rng.random(500, dtype=np.float32)                     # (500,)
    grid = (4,)                                               # 4 blocks of 128 cover 500
    try:
        with ts.backend("reference"):                         # the sanitizer runs on the reference backend
            racy_sum.unsafe_launch(ts.zeros(1), ts.tensor(x), n=500, B=128, grid=grid).sync()
        raise AssertionError("the sanitizer missed the race")
    except ts.SanitizerError as e:
        assert "block (1,) writes it and block (0,) also writes it" in str(e), e
        print(e)
    total = ts.zeros(1)                                       # (1,)
    atomic_sum.unsafe_launch(total, ts.tensor(x), n=500, B=128, grid=grid).sync()
    result = total.numpy()[0]
    np.testing.assert_allclose(result, x.sum(dtype=np.float64), rtol=1e-5)
    print(f"unsafe_race: ok, the racy store is caught; atomic_add sums 500 elements to {result:.4f}")


if __name__ == "__main__":
    main()
