"""ts.mma / ts.dot / `@`: fp32 IEEE and tf32, bf16/f16 inputs with fp32 accumulation, int8 -> i32.

Products are checked against float64 NumPy on the operands' exact values, with an error
bound scaled by |A| @ |B| (so cancellation cannot make a loose result look right).
"""
import numpy as np
import pytest
from lang_helpers import NP, launch, rand

import tilesafe as ts

M, N, K = 70, 40, 50          # ragged in every dimension


def gemm_kernel(precision):
    @ts.kernel
    def k(c: ts.Mut["C", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
          BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], T: ts.Const[ts.DType], C: ts.Const[ts.DType],
          M: int, N: int, K: int):
        pa = a.partition((BM, BK))
        pb = b.partition((BK, BN))
        i, j = ts.block_id(0), ts.block_id(1)
        acc = ts.zeros((BM, BN), C)
        for kk in range(ts.num_tiles(pa, 1)):
            acc = ts.mma(pa.load((i, kk)), pb.load((kk, j)), acc, precision=precision)   # (BM, BN)
        c.store(acc)
    return k


def _check_product(got, a, b, rel):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = rel * (np.abs(a64) @ np.abs(b64)) + 1e-30
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"max scaled error {np.max(err / bound) * rel:.3g} > {rel}"


def _gemm(backend, precision, dtype, acc_dtype, seed, tiles=(32, 16, 16)):
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (M, K), dtype), rand(rng, (K, N), dtype)
    BM, BN, BK = tiles
    got = launch(gemm_kernel(precision), ts.empty((M, N), getattr(ts, acc_dtype)), (BM, BN), ts.tensor(a),
                 ts.tensor(b), BK=BK, T=getattr(ts, dtype), C=getattr(ts, acc_dtype))
    assert got.dtype == NP[acc_dtype]
    return got, a, b


def test_f32_is_ieee_by_default(backend):
    got, a, b = _gemm(backend, None, "f32", "f32", 30)
    _check_product(got, a, b, 1e-5)


def test_f32_explicit_ieee(backend):
    got, a, b = _gemm(backend, "ieee", "f32", "f32", 31, tiles=(16, 32, 32))
    _check_product(got, a, b, 1e-5)


def test_tf32_within_tf32_tolerance(backend):
    got, a, b = _gemm(backend, "tf32", "f32", "f32", 32)
    _check_product(got, a, b, 1e-3)


@pytest.mark.reference_only
def test_tf32_rounds_the_inputs():
    # 1 + 2**-12 is not a tf32 number (10 mantissa bits): tf32 rounds it to 1, IEEE keeps it.
    a = np.full((16, 16), 1 + 2.0 ** -12, np.float32)
    a[1:, :] = 0.5
    b = np.eye(16, dtype=np.float32)
    ieee = launch(gemm_kernel(None), ts.empty((16, 16)), (16, 16), ts.tensor(a), ts.tensor(b), BK=16,
                  T=ts.f32, C=ts.f32)
    tf32 = launch(gemm_kernel("tf32"), ts.empty((16, 16)), (16, 16), ts.tensor(a), ts.tensor(b), BK=16,
                  T=ts.f32, C=ts.f32)
    assert (ieee[0] == np.float32(1 + 2.0 ** -12)).all()
    assert (tf32[0] == 1.0).all()
    assert (tf32[1:] == 0.5).all() and (ieee[1:] == 0.5).all()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_inputs_accumulate_in_f32(backend, dtype):
    # The products of half values are exact in f32; only the f32 accumulation rounds.
    got, a, b = _gemm(backend, None, dtype, "f32", 33)
    _check_product(got, a, b, 1e-5)


@pytest.mark.parametrize("dtype", ["f16"])
def test_f16_accumulator(backend, dtype):
    got, a, b = _gemm(backend, None, dtype, "f16", 34)
    _check_product(got, a, b, 1e-2)


def test_int8_accumulates_in_i32(backend):
    rng = np.random.default_rng(35)
    a, b = rand(rng, (M, K), "i8", -128, 127), rand(rng, (K, N), "i8", -128, 127)
    got = launch(gemm_kernel(None), ts.empty((M, N), ts.i32), (32, 16), ts.tensor(a), ts.tensor(b), BK=32,
                 T=ts.i8, C=ts.i32)
    assert got.dtype == np.int32
    assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))   # would overflow i8/i16


@pytest.mark.reference_only
@pytest.mark.parametrize("dtype", ["f8e4m3fn", "f8e5m2"])
def test_fp8_inputs(dtype):
    rng = np.random.default_rng(36)
    a = rng.uniform(-4, 4, (M, K)).astype(NP[dtype])
    b = rng.uniform(-4, 4, (K, N)).astype(NP[dtype])
    got = launch(gemm_kernel(None), ts.empty((M, N)), (32, 16), ts.tensor(a), ts.tensor(b), BK=16,
                 T=getattr(ts, dtype), C=ts.f32)
    _check_product(got, a, b, 1e-5)


# --- ts.dot and the @ operator -------------------------------------------------------------
@ts.kernel
def dot_single_tile(c: ts.Mut["C", (32, 16)], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
                    T: ts.Const[ts.DType], C: ts.Const[ts.DType], M: int, N: int, K: int):
    i, j = ts.block_id(0), ts.block_id(1)
    x = ts.load(a, (i, 0), shape=(32, 64))          # K <= 64: one tile covers it, zero-padded
    y = ts.load(b, (0, j), shape=(64, 16))
    c.store(ts.dot(x, y) + 0 * (x @ y))


@pytest.mark.parametrize("dtype,acc", [("f32", "f32"), ("bf16", "f32"), ("f16", "f32"), ("i8", "i32")])
def test_dot_and_matmul_operator(backend, dtype, acc):
    rng = np.random.default_rng(37)
    a = rand(rng, (M, K), dtype, -100, 100) if dtype == "i8" else rand(rng, (M, K), dtype)
    b = rand(rng, (K, N), dtype, -100, 100) if dtype == "i8" else rand(rng, (K, N), dtype)
    got = launch(dot_single_tile, ts.empty((M, N), getattr(ts, acc)), (32, 16), ts.tensor(a), ts.tensor(b),
                 T=getattr(ts, dtype), C=getattr(ts, acc))
    assert got.dtype == NP[acc]
    if dtype == "i8":
        assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    else:
        _check_product(got, a, b, 1e-5)


@ts.kernel
def batched(c: ts.Mut[ts.f32, (2, 16, 16)], a: ts.Ref[ts.f32, ("B", "M", "K")], b: ts.Ref[ts.f32, ("B", "K", "N")],
            B: int, M: int, N: int, K: int):
    h, i, j = ts.block_id(0), ts.block_id(1), ts.block_id(2)
    x = ts.load(a, (h, i, 0), shape=(2, 16, 32))
    y = ts.load(b, (h, 0, j), shape=(2, 32, 16))
    c.store(ts.mma(x, y, ts.zeros((2, 16, 16), ts.f32)))


def test_batched_3d_mma(backend):
    rng = np.random.default_rng(38)
    a, b = rand(rng, (3, 20, 30), "f32"), rand(rng, (3, 30, 18), "f32")
    got = launch(batched, ts.empty((3, 20, 18)), (2, 16, 16), ts.tensor(a), ts.tensor(b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(got, a64 @ b64, rtol=1e-5, atol=1e-5 * (np.abs(a64) @ np.abs(b64)).max())

