"""Loads: ts.load at explicit tile indices, device-side partitions and num_tiles, padding,
gather (embedding lookup), and a block reading back its own output tile."""
import numpy as np
import pytest
from lang_helpers import NP, launch, rand

import tilesafe as ts


@ts.kernel
def shift_left(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load(x, (ts.block_id(0) + 1,), shape=(B,), padding=-2.0))   # the next tile


def test_load_at_another_tile_pads_past_the_end(backend):
    x = rand(np.random.default_rng(60), 100, "f32")
    got = launch(shift_left, ts.empty(100), (32,), ts.tensor(x))
    want = np.concatenate([x[32:], np.full(32, -2.0, np.float32)])[:100]
    assert np.array_equal(got, want)


@ts.kernel
def row_sums(z: ts.Mut[ts.f32, ("BM",)], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int], BK: ts.Const[int],
             M: int, N: int):
    px = x.partition((BM, BK))
    acc = ts.zeros((BM,), ts.f32)
    for k in range(ts.num_tiles(px, 1)):              # ceil(N / BK) iterations, the last one ragged
        acc = acc + ts.sum(px.load((ts.block_id(0), k)), axis=1)
    z.store(acc)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_device_partition_and_num_tiles(backend, n):
    x = rand(np.random.default_rng(61), (23, n), "f32")
    got = launch(row_sums, ts.empty(23), (8,), ts.tensor(x), BK=16)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


@ts.kernel
def count_tiles(z: ts.Mut[ts.i32, (2,)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
    px = x.partition((8, 32))
    z.store(ts.join(ts.num_tiles(px, 0) + ts.zeros((1,), ts.i32), ts.num_tiles(px, -1) + ts.zeros((1,), ts.i32))
            .reshape(2))


@pytest.mark.parametrize("shape", [(1, 1), (8, 32), (9, 33), (100, 7)])
def test_num_tiles_is_ceil_div(backend, shape):
    x = rand(np.random.default_rng(62), shape, "f32")
    got = launch(count_tiles, ts.empty(2, ts.i32), (2,), ts.tensor(x))
    assert got.tolist() == [-(-shape[0] // 8), -(-shape[1] // 32)]


# --- gather -----------------------------------------------------------------------------------
def embed_kernel(pad):
    @ts.kernel
    def embed(z: ts.Mut["T", ("BT", "BH")], table: ts.Ref["T", ("V", "H")], ids: ts.Ref[ts.i32, ("S",)],
              BT: ts.Const[int], BH: ts.Const[int], T: ts.Const[ts.DType], V: int, H: int, S: int):
        i, j = ts.block_id(0), ts.block_id(1)
        pos = ts.load(ids, (i,), shape=(BT,))                                             # (BT,) i32
        z.store(ts.gather(table, pos, axis=0, shape=(BT, BH), index=(0, j), padding=pad))  # (BT, BH)
    return embed


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32"])
@pytest.mark.parametrize("pad", [0, -7])
def test_embedding_lookup_with_out_of_range_ids(backend, dtype, pad):
    rng = np.random.default_rng(63)
    V, H, S = 11, 37, 21
    table = rand(rng, (V, H), dtype, -100, 100)
    ids = rng.integers(0, V, S).astype(np.int32)
    ids[[2, 5, 9, 20]] = [V, -1, 1000, -V]                     # out of range: read the padding
    got = launch(embed_kernel(pad), ts.empty((S, H), getattr(ts, dtype)), (8, 16), ts.tensor(table),
                 ts.tensor(ids), T=getattr(ts, dtype))
    want = np.where(((ids >= 0) & (ids < V))[:, None], table[np.clip(ids, 0, V - 1)], pad).astype(NP[dtype])
    assert np.array_equal(got, want)


@ts.kernel
def gather_columns(z: ts.Mut[ts.f32, ("BM", "BC")], x: ts.Ref[ts.f32, ("M", "N")], cols: ts.Ref[ts.i64, ("C",)],
                   BM: ts.Const[int], BC: ts.Const[int], M: int, N: int, C: int):
    i, j = ts.block_id(0), ts.block_id(1)
    pos = ts.load(cols, (j,), shape=(BC,))                                        # (BC,) i64
    z.store(ts.gather(x, pos, axis=1, shape=(BM, BC), index=(i, 0), padding=0.5))  # (BM, BC)


def test_gather_along_axis_1(backend):
    rng = np.random.default_rng(64)
    x = rand(rng, (19, 13), "f32")
    cols = rng.integers(-2, 15, 22).astype(np.int64)       # some out of range on both sides
    got = launch(gather_columns, ts.empty((19, 22)), (8, 8), ts.tensor(x), ts.tensor(cols))
    ok = (cols >= 0) & (cols < 13)
    want = np.where(ok[None, :], x[:, np.clip(cols, 0, 12)], np.float32(0.5))
    assert np.array_equal(got, want)


@ts.kernel
def gather_1d(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], perm: ts.Ref[ts.i32, ("P",)],
              B: ts.Const[int], N: int, P: int):
    z.store(ts.gather(x, ts.load_tile_like(perm, z)))


def test_gather_1d_permutation(backend):
    rng = np.random.default_rng(65)
    x = rand(rng, 50, "f32")
    perm = rng.permutation(50).astype(np.int32)
    got = launch(gather_1d, ts.empty(50), (16,), ts.tensor(x), ts.tensor(perm))
    assert np.array_equal(got, x[perm])


# --- a block reads back its own output (S15 ordering within the block) ---------------------
@ts.kernel
def add_in_place(z: ts.Mut["T", ("BM", "BN")], x: ts.Ref["T", ("M", "N")], BM: ts.Const[int], BN: ts.Const[int],
                 T: ts.Const[ts.DType], M: int, N: int):
    z.store(z.load() + ts.load_tile_like(x, z))
    z.store(z.load(padding=1) * 2)                     # sees the store above


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
def test_read_modify_write_own_tile(backend, dtype):
    rng = np.random.default_rng(66)
    x, z0 = rand(rng, (20, 30), dtype, -50, 50), rand(rng, (20, 30), dtype, -50, 50)
    z = ts.tensor(z0)
    got = launch(add_in_place, z, (16, 16), ts.tensor(x), T=getattr(ts, dtype))
    want = ((z0.astype(np.float64) + x) * 2).astype(NP[dtype])
    assert np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2 if dtype == "f16" else 0)


@ts.kernel
def padded_own_tile(z: ts.Mut[ts.f32, (8,)], s: ts.Mut[ts.f32, (8,)]):
    s.store(ts.sum(z.load(padding=100.0)) + ts.zeros((8,), ts.f32))   # padding is semantics, even for z


def test_own_tile_load_pads_ragged_edges(backend):
    z0 = rand(np.random.default_rng(67), 13, "f32")
    z = ts.tensor(z0)
    s = ts.empty(13)
    pz, ps = z.partition((8,)), s.partition((8,))
    padded_own_tile(pz, ps).sync()
    got = ps.unpartition().numpy()
    assert np.allclose(got[:8], z0[:8].sum()) and np.allclose(got[8:], z0[8:].sum() + 3 * 100.0)
    assert np.array_equal(pz.unpartition().numpy(), z0)      # loaded, never stored: unchanged

