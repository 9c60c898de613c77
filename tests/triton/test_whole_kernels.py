"""Whole kernels — vector add, tiled GEMM with a K loop, softmax with -inf padding, persistent
GEMM over MutTiles, RMSNorm with sub-tiles — run through the generated Triton (CPU
interpreter) in f32 and f16, on ragged and divisible sizes, against NumPy."""
import numpy as np
import pytest

import tilesafe as ts
from triton_helpers import NP, close, gemm as matmul_t, persistent_gemm as pmatmul_t, poisoned


# --- vector add ---------------------------------------------------------------------------------
@ts.kernel
def add(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)],
        B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


@ts.kernel
def add_t(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)],
          T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


@pytest.mark.parametrize("n", [1000, 1024])
def test_vector_add_f32(n):
    rng = np.random.default_rng(0)
    x, y = rng.random(n, np.float32), rng.random(n, np.float32)
    out = add(poisoned(n, "f32").partition((128,)), ts.tensor(x), ts.tensor(y)).sync().unpartition()
    assert np.array_equal(out.numpy(), x + y)   # a single + is bit-exact


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_vector_add_half_ragged(dtype):
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal(1000).astype(NP[dtype]) for _ in range(2))
    out = add_t(poisoned(1000, dtype).partition((128,)), ts.tensor(x), ts.tensor(y)).sync().unpartition()
    assert np.array_equal(out.numpy().astype(np.float32), (x + y).astype(np.float32))   # one rounding: exact


# --- tiled GEMM with a K loop ---------------------------------------------------------------------
@ts.kernel
def matmul(c: ts.Mut[ts.f32, ("BM", "BN")], a: ts.Ref[ts.f32, ("M", "K")], b: ts.Ref[ts.f32, ("K", "N")],
           BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa = a.partition((BM, BK))
    pb = b.partition((BK, BN))
    i, j = ts.block_id(0), ts.block_id(1)
    acc = ts.zeros((BM, BN), ts.f32)
    for k in range(ts.num_tiles(pa, 1)):
        acc = ts.mma(pa.load((i, k)), pb.load((k, j)), acc)
    c.store(acc)


@pytest.mark.parametrize("m,k,n", [(70, 50, 40), (64, 64, 32)])
def test_tiled_gemm_f32(m, k, n):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    out = matmul(poisoned((m, n), "f32").partition((32, 16)), ts.tensor(a), ts.tensor(b), BK=16).sync()
    close(out.unpartition().numpy(), a.astype(np.float64) @ b, "f32")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_tiled_gemm_half_ragged(dtype):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((70, 50)).astype(NP[dtype]), rng.standard_normal((50, 40)).astype(NP[dtype])
    out = matmul_t(poisoned((70, 40), dtype).partition((32, 16)), ts.tensor(a), ts.tensor(b), BK=16).sync()
    close(out.unpartition().numpy(), a.astype(np.float64) @ b.astype(np.float64), dtype)


# --- softmax with -inf padding ----------------------------------------------------------------------
@ts.kernel
def softmax(y: ts.Mut[ts.f32, (1, "BN")], x: ts.Ref[ts.f32, ("M", "N")], BN: ts.Const[int], M: int, N: int):
    t = ts.load_tile_like(x, y, padding=-float("inf"))
    m = ts.max(t, axis=1, keepdims=True)
    e = ts.exp(t - m)
    y.store(e / ts.sum(e, axis=1, keepdims=True))


@ts.kernel
def softmax_t(y: ts.Mut["T", (1, "BN")], x: ts.Ref["T", ("M", "N")], T: ts.Const[ts.DType], BN: ts.Const[int],
              M: int, N: int):
    t = ts.astype(ts.load_tile_like(x, y, padding=-float("inf")), ts.f32)   # (1, BN)
    e = ts.exp(t - ts.max(t, axis=1, keepdims=True))
    y.store(ts.astype(e / ts.sum(e, axis=1, keepdims=True), T))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_softmax_ragged_rows(dtype):
    x = np.random.default_rng(4).standard_normal((5, 100)).astype(NP[dtype])
    kernel = softmax if dtype == "f32" else softmax_t
    got = kernel(poisoned((5, 100), dtype).partition((1, 128)), ts.tensor(x)).sync().unpartition().numpy()
    x64 = x.astype(np.float64)
    want = np.exp(x64 - x64.max(1, keepdims=True))
    close(got, want / want.sum(1, keepdims=True), dtype)


# --- persistent GEMM over MutTiles ------------------------------------------------------------------
@ts.kernel(deny_kernel_checks=True)
def pmatmul(c: ts.MutTiles[ts.f32, ("BM", "BN")], a: ts.Ref[ts.f32, ("M", "K")], b: ts.Ref[ts.f32, ("K", "N")],
            BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa = a.partition((BM, BK)); pb = b.partition((BK, BN))
    for idx in c.tiles(group=2):
        acc = ts.zeros((BM, BN), ts.f32)
        for k in range(ts.num_tiles(pa, 1)):
            acc = ts.mma(pa.load((idx[0], k)), pb.load((k, idx[1])), acc)
        c.store(acc, idx)


def test_persistent_gemm_divisible_f32():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32)
    out = pmatmul(poisoned((64, 96), "f32").partition((16, 32)), ts.tensor(a), ts.tensor(b), BK=16).sync()
    close(out.unpartition().numpy(), a.astype(np.float64) @ b, "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("grid", [None, (1,), (7,)])
def test_persistent_gemm_ragged_any_grid(dtype, grid):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((70, 50)).astype(NP[dtype]), rng.standard_normal((50, 40)).astype(NP[dtype])
    c = poisoned((70, 40), dtype).partition((16, 16))
    args = (c, ts.tensor(a), ts.tensor(b))
    fut = pmatmul_t(*args, BK=16, G=3) if grid is None else pmatmul_t.launch(*args, grid=grid, BK=16, G=3)
    close(fut.sync().unpartition().numpy(), a.astype(np.float64) @ b.astype(np.float64), dtype)


