"""ts.astype: round-to-nearest-even to halves, fp8 saturation, float -> int truncation and saturation."""
import ml_dtypes
import numpy as np
import pytest
from lang_helpers import NP, launch

import tilesafe as ts


@ts.kernel
def convert(z: ts.Mut["D", ("B",)], x: ts.Ref["S", ("N",)], B: ts.Const[int], S: ts.Const[ts.DType],
            D: ts.Const[ts.DType], N: int):
    z.store(ts.astype(ts.load_tile_like(x, z), D))


@ts.kernel
def convert_method(z: ts.Mut["D", ("B",)], x: ts.Ref["S", ("N",)], B: ts.Const[int], S: ts.Const[ts.DType],
                   D: ts.Const[ts.DType], N: int):
    z.store(ts.load_tile_like(x, z).astype(D))


def _convert(x: np.ndarray, src: str, dst: str, kernel=convert) -> np.ndarray:
    return launch(kernel, ts.empty(len(x), getattr(ts, dst)), (16,), ts.tensor(x), S=getattr(ts, src),
                  D=getattr(ts, dst))


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


# Values halfway between neighbours: nearest-even rounds down on even, up on odd mantissas.
# bf16 has 7 mantissa bits (ulp at 1 is 2**-7); f16 has 10 (ulp at 1 is 2**-10).
TIES = {
    "bf16": ([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -(1 + 2.0 ** -8), 2 + 2.0 ** -7, 1 + 2.0 ** -8 + 2.0 ** -20],
             [1.0, 1 + 2.0 ** -6, -1.0, 2.0, 1 + 2.0 ** -7]),
    "f16": ([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -(1 + 3 * 2.0 ** -11), 4 + 2.0 ** -9, 1 + 2.0 ** -11 + 2.0 ** -20],
            [1.0, 1 + 2.0 ** -9, -(1 + 2.0 ** -9), 4.0, 1 + 2.0 ** -10]),
}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("kernel", [convert, convert_method], ids=["ts.astype", "method"])
def test_f32_to_half_rounds_to_nearest_even(backend, dtype, kernel):
    ties, want_ties = TIES[dtype]
    rng = np.random.default_rng(40)
    x = np.concatenate([np.array(ties), rng.uniform(-100, 100, 45)]).astype(np.float32)
    got = _convert(x, "f32", dtype, kernel)
    assert got.dtype == NP[dtype]
    assert list(got[:len(ties)].astype(np.float64)) == want_ties
    # The rest, bit for bit, against ml_dtypes / NumPy (both round to nearest-even).
    assert np.array_equal(_bits(got), _bits(x.astype(NP[dtype])))


def test_half_to_f32_is_exact(backend):
    rng = np.random.default_rng(41)
    x = rng.uniform(-1000, 1000, 37).astype(np.float16)
    got = _convert(x, "f16", "f32")
    assert got.dtype == np.float32 and np.array_equal(got, x.astype(np.float32))


@pytest.mark.reference_only
def test_bf16_f16_round_trip():
    rng = np.random.default_rng(42)
    x = rng.uniform(-50, 50, 40).astype(ml_dtypes.bfloat16)
    got = _convert(x, "bf16", "f16")
    assert np.array_equal(_bits(got), _bits(x.astype(np.float32).astype(np.float16)))


@pytest.mark.parametrize("dtype,limit", [("f8e4m3fn", 448.0), ("f8e5m2", 57344.0)])
def test_fp8_saturates_to_the_finite_range(backend, dtype, limit):
    big = [limit * 1.5, -limit * 1.5, 1e6, -1e6, limit, -limit, limit * 1.01, 3e38]
    rng = np.random.default_rng(43)
    small = rng.uniform(-limit / 2, limit / 2, 30)
    x = np.array(big + list(small), np.float32)
    got = _convert(x, "f32", dtype)
    assert got.dtype == NP[dtype]
    g = got.astype(np.float64)
    assert list(g[:8]) == [limit, -limit, limit, -limit, limit, -limit, limit, limit]
    assert np.array_equal(_bits(got[8:]), _bits(small.astype(np.float32).astype(NP[dtype])))


FLOAT_TO_INT = [
    # (dtype, inputs, expected): truncation toward zero, then saturation
    ("i32", [3.7, -3.7, 0.5, -0.5, 2.5, -2.5, 3e9, -3e9, 1e20, 2147483520.0],
     [3, -3, 0, 0, 2, -2, 2**31 - 1, -2**31, 2**31 - 1, 2147483520]),
    ("i8", [127.9, -128.9, 300.0, -300.0, 5.99, -5.99, 1e10, -0.9, 64.5, 100.0],
     [127, -128, 127, -128, 5, -5, 127, 0, 64, 100]),
    ("u8", [255.9, 256.0, -1.0, -100.0, 3.5, 1e9, 0.99, 200.2, 17.0, 128.5],
     [255, 255, 0, 0, 3, 255, 0, 200, 17, 128]),
    ("i16", [40000.0, -40000.0, 32767.5, -32768.7, 1.9, -1.9, 12.0, 0.1, -0.1, 999.9],
     [32767, -32768, 32767, -32768, 1, -1, 12, 0, 0, 999]),
]


@pytest.mark.parametrize("dtype,inputs,want", FLOAT_TO_INT, ids=[r[0] for r in FLOAT_TO_INT])
def test_float_to_int_truncates_and_saturates(backend, dtype, inputs, want):
    got = _convert(np.array(inputs, np.float32), "f32", dtype)
    assert got.dtype == NP[dtype]
    assert got.tolist() == want


@pytest.mark.reference_only
def test_bf16_to_int_truncates():
    x = np.array([1.5, -1.5, 200.0, -200.0, 99.5], ml_dtypes.bfloat16)
    assert _convert(x, "bf16", "i8").tolist() == [1, -1, 127, -128, 99]


def test_int_to_float_and_bool(backend):
    x = np.array([0, 1, -7, 2**24 + 1, 123456789, -5, 0, 3], np.int32)
    assert np.array_equal(_convert(x, "i32", "f32"), x.astype(np.float32))
    assert _convert(x, "i32", "bool_").tolist() == [v != 0 for v in x.tolist()]
    b = np.array([True, False, True, True, False], np.bool_)
    assert _convert(b, "bool_", "f32").tolist() == [1.0, 0.0, 1.0, 1.0, 0.0]
    assert _convert(b, "bool_", "i32").tolist() == [1, 0, 1, 1, 0]


def test_int_to_narrower_int_wraps(backend):
    x = np.array([127, 128, 255, 256, -129, 1000, -1, 5], np.int32)
    assert np.array_equal(_convert(x, "i32", "i8"), x.astype(np.int8))


def test_float_to_bool_is_nonzero(backend):
    x = np.array([0.0, -0.0, 0.1, -3.0, 1e-30, 2.0], np.float32)
    assert _convert(x, "f32", "bool_").tolist() == [False, False, True, True, True, True]
