"""Shape ops (reshape, permute, transpose, broadcast_to, expand_dims, join, subscripts) and
tile constructors (arange, zeros, full), valid() and scalar()."""
import numpy as np
import pytest
from lang_helpers import NP, launch, rand

import tilesafe as ts


@ts.kernel
def transpose_copy(z: ts.Mut["T", ("BN", "BM")], x: ts.Ref["T", ("M", "N")], BM: ts.Const[int], BN: ts.Const[int],
                   T: ts.Const[ts.DType], M: int, N: int):
    t = ts.load(x, (ts.block_id(1), ts.block_id(0)), shape=(BM, BN))    # (BM, BN)
    z.store(ts.transpose(t))                                              # (BN, BM)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32"])
def test_transpose_copy(backend, dtype):
    x = rand(np.random.default_rng(50), (37, 21), dtype, -100, 100)
    got = launch(transpose_copy, ts.empty((21, 37), getattr(ts, dtype)), (8, 16), ts.tensor(x), BM=16,
                 T=getattr(ts, dtype))
    assert np.array_equal(got, x.T)


@ts.kernel
def shuffle3d(z: ts.Mut[ts.f32, (4, 2, 8)], x: ts.Ref[ts.f32, ("A", "B", "C")], A: int, B: int, C: int):
    i, j, k = ts.block_id(0), ts.block_id(1), ts.block_id(2)
    t = ts.load(x, (k, i, j), shape=(8, 4, 2))                # x is (C', A', B') relative to z
    z.store(ts.permute(t, (1, 2, 0)) + t.permute(1, 2, 0))    # (4, 2, 8)


def test_permute_3d(backend):
    x = rand(np.random.default_rng(51), (11, 9, 5), "f32")
    got = launch(shuffle3d, ts.empty((9, 5, 11)), (4, 2, 8), ts.tensor(x))
    assert np.array_equal(got, 2 * np.transpose(x, (1, 2, 0)))


@ts.kernel
def reshape_rows(z: ts.Mut[ts.f32, (4, 8)], x: ts.Ref[ts.f32, ("N",)], N: int):
    t = ts.load(x, (ts.block_id(0),), shape=(32,))      # (32,)
    r = ts.reshape(t, (4, 8)) + t.reshape(4, 8) * 0     # (4, 8) row-major
    z.store(r)


def test_reshape_is_row_major(backend):
    x = rand(np.random.default_rng(52), 96, "f32")
    got = launch(reshape_rows, ts.empty((12, 8)), (4, 8), ts.tensor(x))
    assert np.array_equal(got, x.reshape(12, 8))


@ts.kernel
def outer(z: ts.Mut[ts.f32, ("BM", "BN")], u: ts.Ref[ts.f32, ("M",)], v: ts.Ref[ts.f32, ("N",)],
          BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    a = ts.expand_dims(ts.load(u, (ts.block_id(0),), shape=(BM,)), 1)    # (BM, 1)
    b = ts.expand_dims(ts.load(v, (ts.block_id(1),), shape=(BN,)), -2)   # (1, BN)
    z.store(ts.broadcast_to(a, (BM, BN)) * ts.broadcast_to(b, (BM, BN)) + b[:, :] * 0)


def test_expand_dims_and_broadcast_to(backend):
    rng = np.random.default_rng(53)
    u, v = rand(rng, 29, "f32"), rand(rng, 19, "f32")
    got = launch(outer, ts.empty((29, 19)), (16, 8), ts.tensor(u), ts.tensor(v))
    assert np.array_equal(got, np.outer(u, v))


@ts.kernel
def interleave(z: ts.Mut["T", ("B", 2)], re: ts.Ref["T", ("N",)], im: ts.Ref["T", ("N",)], B: ts.Const[int],
               T: ts.Const[ts.DType], N: int):
    i = ts.block_id(0)
    z.store(ts.join(ts.load(re, (i,), shape=(B,)), ts.load(im, (i,), shape=(B,))))   # (B, 2)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i8"])
def test_join_stacks_on_a_new_last_axis(backend, dtype):
    rng = np.random.default_rng(54)
    re, im = rand(rng, 45, dtype, -100, 100), rand(rng, 45, dtype, -100, 100)
    got = launch(interleave, ts.empty((45, 2), getattr(ts, dtype)), (16, 2), ts.tensor(re), ts.tensor(im),
                 T=getattr(ts, dtype))
    assert np.array_equal(got, np.stack([re, im], axis=-1))


# --- constructors -------------------------------------------------------------------------
@ts.kernel
def iota(z: ts.Mut[ts.i32, ("B",)], B: ts.Const[int], OFF: ts.Const[int]):
    z.store(ts.arange(OFF, OFF + B) + ts.block_id(0) * B + ts.arange(B) * 0)


def test_arange(backend):
    got = launch(iota, ts.empty(100, ts.i32), (32,), OFF=5)
    assert got.dtype == np.int32 and np.array_equal(got, np.arange(100) + 5)


@ts.kernel
def fills(z: ts.Mut["T", (8, "B")], v: float, B: ts.Const[int], T: ts.Const[ts.DType]):
    a = ts.zeros((8, B), T)
    b = ts.full((8, B), 2.5, T)
    c = ts.full((1, B), v, T)                  # a runtime fill value
    z.store(a + b * c + ts.zeros((8, 1), T))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_zeros_and_full(backend, dtype):
    got = launch(fills, ts.empty((20, 50), getattr(ts, dtype)), (8, 16), 1.75, T=getattr(ts, dtype))
    assert got.dtype == NP[dtype]
    assert (got.astype(np.float64) == 2.5 * 1.75).all()


@ts.kernel
def int_fill(z: ts.Mut[ts.i32, ("B",)], n: int, B: ts.Const[int]):
    z.store(ts.full((B,), n, ts.i32) - ts.full((B,), 3, ts.i32))


def test_full_int_runtime_value(backend):
    got = launch(int_fill, ts.empty(40, ts.i32), (16,), 1000)
    assert (got == 997).all() and got.shape == (40,)


@ts.kernel
def extent_fill(z: ts.Mut[ts.i32, ("B", 4)], B: ts.Const[int]):
    n, m = z.extent
    z.store(ts.full((B, 4), n * 100 + m, ts.i32))


def test_extent_is_the_runtime_shape(backend):
    got = launch(extent_fill, ts.empty((13, 7), ts.i32), (8, 4))
    assert (got == 1307).all()


# --- valid() and scalar() -------------------------------------------------------------------
@ts.kernel
def count_valid(z: ts.Mut[ts.i32, (1, 1)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
    t = ts.load(x, (ts.block_id(0), ts.block_id(1)), shape=(8, 16), padding=7.0)
    m = ts.valid(t)                                         # (8, 16) bool
    z.store(ts.sum(ts.astype(m, ts.i32), keepdims=True) + ts.sum(ts.where(m, 0, 1), keepdims=True) * 1000)


def test_valid_is_the_in_bounds_mask(backend):
    x = rand(np.random.default_rng(55), (21, 37), "f32")
    got = launch(count_valid, ts.empty((3, 3), ts.i32), (1, 1), ts.tensor(x))
    rows = np.array([8, 8, 5])[:, None]
    cols = np.array([16, 16, 5])[None, :]
    inside = rows * cols
    assert np.array_equal(got, inside + (128 - inside) * 1000)


@ts.kernel
def scale_by_total(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], s: ts.Ref[ts.f32, (1,)], B: ts.Const[int],
                   N: int):
    total = ts.scalar(ts.load(s, (0,), shape=(1,)))          # f32 scalar
    k = ts.scalar(ts.sum(ts.load(s, (0,), shape=(2,))))       # sum over a padded pair
    z.store(ts.load_tile_like(x, z) * total + k)


def test_scalar_of_a_one_element_tile(backend):
    x = rand(np.random.default_rng(56), 50, "f32")
    s = np.array([2.5], np.float32)
    got = launch(scale_by_total, ts.empty(50), (16,), ts.tensor(x), ts.tensor(s))
    np.testing.assert_allclose(got, x * np.float32(2.5) + np.float32(2.5), rtol=1e-6)


@ts.kernel
def per_block_constant(z: ts.Mut[ts.i32, ("B",)], w: ts.Mut[ts.i32, ("B",)], B: ts.Const[int]):
    i = ts.block_id(0)
    z.store(ts.broadcast_to(i * 10 + 1, (B,)))     # a scalar broadcast to the tile
    w.store(i * 100)                                # a scalar stored as the whole tile


def test_scalars_fill_only_their_blocks_tile(backend):
    # A past bug: a scalar stayed a scalar through broadcast_to and store, and the reference
    # backend then wrote it over the whole output from every block.
    z, w = ts.empty(40, ts.i32), ts.empty(40, ts.i32)
    pz, pw = z.partition((16,)), w.partition((16,))
    per_block_constant(pz, pw).sync()
    blocks = np.arange(40) // 16
    assert np.array_equal(pz.unpartition().numpy(), blocks * 10 + 1)
    assert np.array_equal(pw.unpartition().numpy(), blocks * 100)
