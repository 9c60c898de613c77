"""Elementwise arithmetic, comparisons, broadcasting, scalar promotion and math functions."""
import numpy as np
import pytest
from lang_helpers import NP, assert_close, launch, rand

import tilesafe as ts

N = 100          # ragged: 100 = 3 * 32 + 4
TILE = (32,)
FLOATS = ["f32", "f16", "bf16"]


# --- binary arithmetic on two loaded tiles -------------------------------------------------
@ts.function
def _add(a, b):
    return a + b


@ts.function
def _sub(a, b):
    return a - b


@ts.function
def _mul(a, b):
    return a * b


@ts.function
def _div(a, b):
    return a / b


@ts.function
def _maximum(a, b):
    return ts.maximum(a, b)


@ts.function
def _minimum(a, b):
    return ts.minimum(a, b)


def binary_kernel(op):
    @ts.kernel
    def k(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)],
          B: ts.Const[int], T: ts.Const[ts.DType], N: int):
        z.store(op(ts.load_tile_like(x, z), ts.load_tile_like(y, z)))
    return k


BINARY = [(_add, np.add), (_sub, np.subtract), (_mul, np.multiply), (_div, np.divide),
          (_maximum, np.maximum), (_minimum, np.minimum)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op,oracle", BINARY, ids=["add", "sub", "mul", "div", "maximum", "minimum"])
def test_float_binary(backend, dtype, op, oracle):
    rng = np.random.default_rng(1)
    x = rand(rng, N, dtype)
    y = rand(rng, N, dtype, 0.5, 4.0) * np.where(rng.random(N) < 0.5, -1, 1).astype(NP[dtype])
    got = launch(binary_kernel(op), ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x), ts.tensor(y))
    assert got.dtype == NP[dtype]
    # One op rounds once from the exact result: compute in f64, round to the dtype. Bit equality
    # holds for + - * max min; division may be approximate on a GPU (DESIGN §2).
    want = oracle(x.astype(np.float64), y.astype(np.float64)).astype(NP[dtype])
    if op is _div:
        assert_close(got, want, dtype)
    else:
        assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), "single ops are correctly rounded"


@pytest.mark.parametrize("dtype", ["i32", "i8", "i64"])
@pytest.mark.parametrize("op,oracle", BINARY[:3] + BINARY[4:], ids=["add", "sub", "mul", "maximum", "minimum"])
def test_int_binary(backend, dtype, op, oracle):
    rng = np.random.default_rng(2)
    x, y = rand(rng, N, dtype, -50, 50), rand(rng, N, dtype, -50, 50)
    got = launch(binary_kernel(op), ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x), ts.tensor(y))
    want = oracle(x.astype(np.int64), y.astype(np.int64)).astype(NP[dtype])   # i8 products wrap
    assert got.dtype == NP[dtype] and np.array_equal(got, want)


# --- integer floor division and modulo (Python semantics) -----------------------------------
@ts.function
def _floordiv(a, b):
    return a // b


@ts.function
def _mod(a, b):
    return a % b


@pytest.mark.parametrize("dtype", ["i32", "i64", "i16"])
@pytest.mark.parametrize("op", [_floordiv, _mod], ids=["floordiv", "mod"])
def test_int_floordiv_mod_follow_python(backend, dtype, op):
    rng = np.random.default_rng(3)
    x = rand(rng, N, dtype, -100, 100)
    y = rand(rng, N, dtype, 1, 9) * np.where(rng.random(N) < 0.5, -1, 1).astype(NP[dtype])
    x[:4], y[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]     # the cases C truncation gets wrong
    got = launch(binary_kernel(op), ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x), ts.tensor(y))
    py = (lambda a, b: a // b) if op is _floordiv else (lambda a, b: a % b)
    want = np.array([py(int(a), int(b)) for a, b in zip(x, y)], NP[dtype])
    assert np.array_equal(got, want)
    assert list(got[:4]) == ([-4, -4, 3, 3] if op is _floordiv else [1, -1, -1, 1])


# --- comparisons -> bool tiles -------------------------------------------------------------
CMPS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
        "!=": np.not_equal}


@ts.function
def _cmp(a, b, OP):
    if OP == "<":
        r = a < b
    elif OP == "<=":
        r = a <= b
    elif OP == ">":
        r = a > b
    elif OP == ">=":
        r = a >= b
    elif OP == "==":
        r = a == b
    else:
        r = a != b
    return r


def compare_kernel(op):
    @ts.kernel
    def k(z: ts.Mut[ts.bool_, ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)],
          B: ts.Const[int], T: ts.Const[ts.DType], N: int):
        z.store(_cmp(ts.load_tile_like(x, z), ts.load_tile_like(y, z), op))
    return k


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32"])
@pytest.mark.parametrize("op", list(CMPS))
def test_comparisons(backend, dtype, op):
    rng = np.random.default_rng(4)
    x, y = rand(rng, N, dtype, -5, 5), rand(rng, N, dtype, -5, 5)
    y[::3] = x[::3]                                   # ties, so == and <= are exercised
    got = launch(compare_kernel(op), ts.empty(N, ts.bool_), TILE, ts.tensor(x), ts.tensor(y))
    assert got.dtype == np.bool_
    assert np.array_equal(got, CMPS[op](x, y))


# --- broadcasting -------------------------------------------------------------------------
@ts.kernel
def bias_scale(z: ts.Mut[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], row: ts.Ref[ts.f32, ("N",)],
               col: ts.Ref[ts.f32, ("M",)], BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    i, j = ts.block_id(0), ts.block_id(1)
    r = ts.expand_dims(ts.load(row, (j,), shape=(BN,)), 0)        # (1, BN)
    c = ts.load(col, (i,), shape=(BM,))[:, None]                    # (BM, 1)
    z.store(ts.load_tile_like(x, z) * c + r)                        # (BM, BN)


def test_broadcasting_row_and_column(backend):
    rng = np.random.default_rng(5)
    x, row, col = rand(rng, (37, 45), "f32"), rand(rng, 45, "f32"), rand(rng, 37, "f32")
    got = launch(bias_scale, ts.empty((37, 45)), (16, 16), ts.tensor(x), ts.tensor(row), ts.tensor(col))
    assert_close(got, x * col[:, None] + row[None, :], "f32")


# --- Python scalars are weak --------------------------------------------------------------
@ts.kernel
def int_times_float(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.i32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 1.5)          # i32 tile * Python float -> f32


@ts.kernel
def half_plus_scalars(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], B: ts.Const[int], T: ts.Const[ts.DType],
                      N: int):
    z.store(2 * ts.load_tile_like(x, z) + 0.25 - 1)   # a Python scalar takes the tile's dtype


@ts.kernel
def int_plus_int(z: ts.Mut[ts.i8, ("B",)], x: ts.Ref[ts.i8, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 100)           # stays i8 (and wraps)


def test_int_tile_times_python_float_is_f32(backend):
    rng = np.random.default_rng(6)
    x = rand(rng, N, "i32", -1000, 1000)
    got = launch(int_times_float, ts.empty(N), TILE, ts.tensor(x))
    assert got.dtype == np.float32 and np.array_equal(got, x.astype(np.float32) * np.float32(1.5))


@pytest.mark.parametrize("dtype", FLOATS)
def test_python_scalar_takes_float_tile_dtype(backend, dtype):
    rng = np.random.default_rng(7)
    x = rand(rng, N, dtype)
    got = launch(half_plus_scalars, ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x))
    assert got.dtype == NP[dtype]
    want = ((2 * x.astype(np.float64)).astype(NP[dtype]).astype(np.float64) + 0.25).astype(NP[dtype])
    want = (want.astype(np.float64) - 1).astype(NP[dtype])     # each op rounds to the dtype
    assert_close(got, want, dtype)


def test_int8_plus_python_int_stays_int8(backend):
    x = np.array([1, 27, 28, 100, -100, -128, 127, 5], np.int8)
    got = launch(int_plus_int, ts.empty(8, ts.i8), (8,), ts.tensor(x))
    assert got.dtype == np.int8
    assert np.array_equal(got, (x.astype(np.int64) + 100).astype(np.int8))


# --- unary math ---------------------------------------------------------------------------
def unary_kernel(op):
    @ts.kernel
    def k(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], B: ts.Const[int], T: ts.Const[ts.DType], N: int):
        z.store(op(ts.load_tile_like(x, z)))
    return k


def _erf(x):
    from math import erf
    return np.vectorize(erf)(x)


UNARY = {  # name: (stub, oracle, input range)
    "exp": (ts.exp, np.exp, (-4, 4)), "exp2": (ts.exp2, np.exp2, (-4, 4)), "log": (ts.log, np.log, (0.05, 20)),
    "log2": (ts.log2, np.log2, (0.05, 20)), "sqrt": (ts.sqrt, np.sqrt, (0.01, 50)),
    "rsqrt": (ts.rsqrt, lambda v: 1 / np.sqrt(v), (0.01, 50)), "sin": (ts.sin, np.sin, (-6, 6)),
    "cos": (ts.cos, np.cos, (-6, 6)), "tanh": (ts.tanh, np.tanh, (-6, 6)),
    "sigmoid": (ts.sigmoid, lambda v: 1 / (1 + np.exp(-v)), (-8, 8)), "erf": (ts.erf, _erf, (-3, 3)),
    "abs": (ts.abs, np.abs, (-5, 5)), "floor": (ts.floor, np.floor, (-5, 5)), "ceil": (ts.ceil, np.ceil, (-5, 5)),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math(backend, dtype, name):
    stub, oracle, (lo, hi) = UNARY[name]
    rng = np.random.default_rng(8)
    x = rand(rng, N, dtype, lo, hi)
    got = launch(unary_kernel(stub), ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x))
    assert got.dtype == NP[dtype]
    assert_close(got, oracle(x.astype(np.float64)).astype(NP[dtype]), dtype)


@ts.kernel
def int_abs_neg(z: ts.Mut[ts.i32, ("B",)], x: ts.Ref[ts.i32, ("N",)], B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    z.store(ts.abs(t) * 10 + abs(-t) - (-t))


def test_int_abs_and_negation(backend):
    x = rand(np.random.default_rng(9), N, "i32", -1000, 1000)
    got = launch(int_abs_neg, ts.empty(N, ts.i32), TILE, ts.tensor(x))
    assert np.array_equal(got, np.abs(x) * 10 + np.abs(x) + x)


# --- where, fma, bitwise, boolean logic ----------------------------------------------------
@ts.kernel
def relu_where(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)],
               B: ts.Const[int], T: ts.Const[ts.DType], N: int):
    a, b = ts.load_tile_like(x, z), ts.load_tile_like(y, z)
    z.store(ts.where(a > b, a, 0.5) + ts.where((a < 0) & (b < 0), b, a))


@pytest.mark.parametrize("dtype", FLOATS)
def test_where_with_scalar_branch(backend, dtype):
    rng = np.random.default_rng(10)
    x, y = rand(rng, N, dtype), rand(rng, N, dtype)
    got = launch(relu_where, ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x), ts.tensor(y))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    want = np.where(x64 > y64, x64, 0.5) + np.where((x64 < 0) & (y64 < 0), y64, x64)
    assert_close(got, want.astype(NP[dtype]), dtype)


@ts.kernel
def fused(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)],
          B: ts.Const[int], T: ts.Const[ts.DType], N: int):
    a, b = ts.load_tile_like(x, z), ts.load_tile_like(y, z)
    z.store(ts.fma(a, b, a) + ts.fma(a, 2.0, -1.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_fma(backend, dtype):
    rng = np.random.default_rng(11)
    x, y = rand(rng, N, dtype), rand(rng, N, dtype)
    got = launch(fused, ts.empty(N, getattr(ts, dtype)), TILE, ts.tensor(x), ts.tensor(y))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert_close(got, (x64 * y64 + x64 + (x64 * 2 - 1)).astype(NP[dtype]), dtype)


@ts.kernel
def bits(z: ts.Mut[ts.i32, ("B",)], x: ts.Ref[ts.i32, ("N",)], y: ts.Ref[ts.i32, ("N",)], B: ts.Const[int], N: int):
    a, b = ts.load_tile_like(x, z), ts.load_tile_like(y, z)
    z.store(((a & b) ^ (a | 7)) + (a << 2) + (b >> 1) + ~a)


def test_bitwise_ops(backend):
    rng = np.random.default_rng(12)
    x, y = rand(rng, N, "i32", -1000, 1000), rand(rng, N, "i32", -1000, 1000)
    got = launch(bits, ts.empty(N, ts.i32), TILE, ts.tensor(x), ts.tensor(y))
    assert np.array_equal(got, ((x & y) ^ (x | 7)) + (x << 2) + (y >> 1) + ~x)


@ts.kernel
def logic(z: ts.Mut[ts.bool_, ("B",)], x: ts.Ref[ts.bool_, ("N",)], y: ts.Ref[ts.bool_, ("N",)],
          B: ts.Const[int], N: int):
    a, b = ts.load_tile_like(x, z), ts.load_tile_like(y, z)
    z.store((a & ~b) | (b ^ a) | ((a == b) & a))


def test_bool_logic(backend):
    rng = np.random.default_rng(13)
    x, y = rand(rng, N, "bool_"), rand(rng, N, "bool_")
    got = launch(logic, ts.empty(N, ts.bool_), TILE, ts.tensor(x), ts.tensor(y))
    assert np.array_equal(got, (x & ~y) | (y ^ x) | ((x == y) & x))


@ts.kernel
def power(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    z.store(t ** 3 - t ** 2)


def test_small_integer_power(backend):
    x = rand(np.random.default_rng(14), N, "f32")
    got = launch(power, ts.empty(N), TILE, ts.tensor(x))
    x64 = x.astype(np.float64)
    assert_close(got, x64 ** 3 - x64 ** 2, "f32")
