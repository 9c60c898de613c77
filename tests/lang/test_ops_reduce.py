"""Reductions (sum/max/min/argmax/argmin with axis and keepdims) and cumsum, over ragged tiles.

A ragged tile is loaded with a padding the reduction ignores (0 for sum, -inf for max, +inf
for min): padding is semantics (DESIGN §2), so the result is the reduction of the valid part.
"""
import numpy as np
import pytest
from lang_helpers import NP, TOL, assert_close, launch, rand

import tilesafe as ts

M, N = 19, 45          # rows x columns, neither a power of two
BM, BN = 32, 64        # one tile covers a whole row / column


def _pad(op):
    return {"sum": 0.0, "max": -float("inf"), "min": float("inf"), "argmax": -float("inf"),
            "argmin": float("inf")}[op]


def _stub(op):
    return {"sum": ts.sum, "max": ts.max, "min": ts.min, "argmax": ts.argmax, "argmin": ts.argmin}[op]


def _oracle(op, x, axis, keepdims):
    f = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}[op]
    return f(x.astype(np.float64), axis=axis, keepdims=keepdims)


def row_kernel(op, pad, keepdims):
    """Reduce each row (axis 1); rows are split across blocks, each row fits one tile."""
    if keepdims:
        @ts.kernel
        def k(y: ts.Mut["R", ("BR", 1)], x: ts.Ref["T", ("M", "N")], BR: ts.Const[int], BC: ts.Const[int],
              T: ts.Const[ts.DType], R: ts.Const[ts.DType], M: int, N: int):
            t = ts.load(x, (ts.block_id(0), 0), shape=(BR, BC), padding=pad)   # (BR, BC)
            y.store(op(t, axis=1, keepdims=True))                                # (BR, 1)
    else:
        @ts.kernel
        def k(y: ts.Mut["R", ("BR",)], x: ts.Ref["T", ("M", "N")], BR: ts.Const[int], BC: ts.Const[int],
              T: ts.Const[ts.DType], R: ts.Const[ts.DType], M: int, N: int):
            t = ts.load(x, (ts.block_id(0), 0), shape=(BR, BC), padding=pad)   # (BR, BC)
            y.store(op(t, axis=-1))                                              # (BR,)
    return k


def col_kernel(op, pad):
    """Reduce each column (axis 0) with keepdims; columns are split across blocks."""
    @ts.kernel
    def k(y: ts.Mut["R", (1, "BC")], x: ts.Ref["T", ("M", "N")], BR: ts.Const[int], BC: ts.Const[int],
          T: ts.Const[ts.DType], R: ts.Const[ts.DType], M: int, N: int):
        t = ts.load(x, (0, ts.block_id(1)), shape=(BR, BC), padding=pad)       # (BR, BC)
        y.store(op(t, axis=0, keepdims=True))                                    # (1, BC)
    return k


def _result_dtype(op, dtype):
    if op in ("argmax", "argmin"):
        return "i32"
    if op == "sum" and dtype in ("i8", "i16"):
        return "i32"
    return dtype


def _check(got, want, op, dtype, rdtype):
    if op in ("argmax", "argmin") or dtype.startswith("i"):
        assert np.array_equal(got, want.astype(NP[rdtype]))
    elif op in ("max", "min"):
        assert np.array_equal(got.astype(np.float64), want)     # max/min pick an element exactly
    else:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol * N)


OPS = ["sum", "max", "min", "argmax", "argmin"]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "i8"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("op", OPS)
def test_reduce_rows(backend, op, keepdims, dtype):
    rng = np.random.default_rng(20)
    x = rand(rng, (M, N), dtype, -50, 50) if dtype.startswith("i") else rand(rng, (M, N), dtype)
    pad = _pad(op)
    if dtype.startswith("i"):
        pad = {"sum": 0, "max": -128, "min": 127, "argmax": -128, "argmin": 127}[op]
    rdtype = _result_dtype(op, dtype)
    shape, tile = ((M, 1), (8, 1)) if keepdims else ((M,), (8,))
    got = launch(row_kernel(_stub(op), pad, keepdims), ts.empty(shape, getattr(ts, rdtype)), tile,
                 ts.tensor(x), BC=BN, T=getattr(ts, dtype), R=getattr(ts, rdtype))
    assert got.dtype == NP[rdtype]
    _check(got, _oracle(op, x, 1, keepdims), op, dtype, rdtype)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("op", OPS)
def test_reduce_columns_keepdims(backend, op, dtype):
    rng = np.random.default_rng(21)
    x = rand(rng, (M, N), dtype)
    rdtype = _result_dtype(op, dtype)
    got = launch(col_kernel(_stub(op), _pad(op)), ts.empty((1, N), getattr(ts, rdtype)), (1, 16),
                 ts.tensor(x), BR=BM, T=getattr(ts, dtype), R=getattr(ts, rdtype))
    _check(got, _oracle(op, x, 0, True), op, dtype, rdtype)


@ts.kernel
def chunk_sums(y: ts.Mut[ts.f32, (1,)], x: ts.Ref[ts.f32, ("N",)], C: ts.Const[int], N: int):
    t = ts.load(x, (ts.block_id(0),), shape=(C,))      # (C,) one chunk, zero-padded
    y.store(ts.sum(t))                                   # () broadcast into (1,)


@ts.kernel
def tile_max_all_axes(y: ts.Mut[ts.f32, (1, 1)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
    t = ts.load(x, (0, 0), shape=(32, 64), padding=-float("inf"))
    y.store(ts.max(t, keepdims=True))                   # axis=None over a 2-D tile


def test_full_reduction_without_axis(backend):
    rng = np.random.default_rng(22)
    x = rand(rng, 1000, "f32")
    got = launch(chunk_sums, ts.empty(8), (1,), ts.tensor(x), C=128)
    want = np.array([x[i * 128:(i + 1) * 128].astype(np.float64).sum() for i in range(8)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    x2 = rand(rng, (M, N), "f32")
    got = launch(tile_max_all_axes, ts.empty((1, 1)), (1, 1), ts.tensor(x2))
    assert got[0, 0] == x2.max()


@ts.kernel
def first_max(y: ts.Mut[ts.i32, (2,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    t = ts.load(x, (0,), shape=(16,), padding=-1.0)
    y.store(ts.join(ts.argmax(t, 0), ts.argmin(t, 0)))


def test_argmax_argmin_pick_the_first_on_ties(backend):
    x = np.array([1, 5, 2, 5, 0, 0, 3, 5, 0.5, 0.25, 1, 2], np.float32)   # padded to 16 with -1
    got = launch(first_max, ts.empty(2, ts.i32), (2,), ts.tensor(x))
    assert list(got) == [1, 12]    # the first 5; the first -1 is padding at index 12


# --- cumsum ---------------------------------------------------------------------------------
def cumsum_kernel(axis):
    @ts.kernel
    def k(y: ts.Mut["R", ("BR", "BC")], x: ts.Ref["T", ("M", "N")], BR: ts.Const[int], BC: ts.Const[int],
          T: ts.Const[ts.DType], R: ts.Const[ts.DType], M: int, N: int):
        y.store(ts.cumsum(ts.load_tile_like(x, y), axis))
    return k


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "i8"])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum(backend, axis, dtype):
    rng = np.random.default_rng(23)
    x = rand(rng, (M, N), dtype, -20, 20) if dtype.startswith("i") else rand(rng, (M, N), dtype)
    rdtype = "i32" if dtype == "i8" else dtype
    # The tile spans the whole scanned axis, so each block's scan is the full scan.
    tile = (32, 8) if axis == 0 else (4, 64)
    got = launch(cumsum_kernel(axis), ts.empty((M, N), getattr(ts, rdtype)), tile, ts.tensor(x),
                 T=getattr(ts, dtype), R=getattr(ts, rdtype))
    want = np.cumsum(x.astype(np.float64), axis=axis)
    if dtype.startswith("i"):
        assert got.dtype == NP[rdtype] and np.array_equal(got, want.astype(NP[rdtype]))
    else:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol * 10)


@ts.kernel
def count_true(y: ts.Mut[ts.i32, (1,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    t = ts.load(x, (ts.block_id(0),), shape=(64,))
    y.store(ts.sum(t > 0.0))                          # bool sum counts, in i32


def test_sum_of_bools_counts(backend):
    x = rand(np.random.default_rng(24), 200, "f32")
    got = launch(count_true, ts.empty(4, ts.i32), (1,), ts.tensor(x))
    assert got.dtype == np.int32
    assert list(got) == [int((x[i * 64:(i + 1) * 64] > 0).sum()) for i in range(4)]


@ts.kernel
def tile_methods(y: ts.Mut[ts.f32, ("BR",)], x: ts.Ref[ts.f32, ("M", "N")], BR: ts.Const[int], M: int, N: int):
    t = ts.load(x, (ts.block_id(0), 0), shape=(BR, 64))
    y.store(t.sum(1) + t.max(axis=1) - t.min(axis=1))


def test_reductions_as_tile_methods(backend):
    x = rand(np.random.default_rng(25), (M, N), "f32", 0.5, 3)   # positive: zero padding is the min
    got = launch(tile_methods, ts.empty(M), (8,), ts.tensor(x))
    want = x.astype(np.float64).sum(1) + x.max(1) - 0.0
    assert_close(got, want, "f32")
