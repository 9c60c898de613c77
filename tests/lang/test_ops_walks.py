"""Persistent walks `z.tiles(group=, within=)` and sub-tile walks `z.subtiles(shape)`."""
import numpy as np
import pytest
from lang_helpers import launch, poisoned, rand

import tilesafe as ts


@ts.kernel
def tagged_copy(z: ts.MutTiles[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], G: ts.Const[int],
                BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    for idx in z.tiles(group=G):
        t = ts.load(x, idx, shape=z.tile_shape)                     # (BM, BN)
        z.store(t + ts.astype(idx[0] * 1000 + idx[1] * 100000, ts.f32), idx)


def _tagged_oracle(x, BM, BN):
    i, j = np.meshgrid(np.arange(x.shape[0]) // BM, np.arange(x.shape[1]) // BN, indexing="ij")
    return x.astype(np.float64) + i * 1000 + j * 100000


@pytest.mark.parametrize("group", [1, 2, 3, 8])
@pytest.mark.parametrize("grid", [None, 1, 2, 5, 64])
def test_tiles_cover_every_tile_once_for_any_grid(backend, group, grid):
    # Every element is written (the output comes from ts.empty) with its own tile's tag; the
    # next test counts the visits, since a tile stored twice would still match here.
    x = rand(np.random.default_rng(80), (45, 70), "f32")
    got = launch(tagged_copy, ts.empty((45, 70)), (8, 16), ts.tensor(x), G=group, grid=grid)
    np.testing.assert_allclose(got, _tagged_oracle(x, 8, 16), rtol=1e-6)


@ts.kernel
def count_visits(z: ts.MutTiles[ts.i32, (4, 4)], G: ts.Const[int]):
    for idx in z.tiles(group=G):
        z.store(z.load(idx) + 1, idx)


@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("grid", [None, 1, 4, 7, 100])
def test_each_tile_is_visited_exactly_once(backend, group, grid):
    z = ts.zeros((22, 13), ts.i32)
    got = launch(count_visits, z, (4, 4), G=group, grid=grid)
    assert (got == 1).all()


@ts.kernel
def copy_3d(z: ts.MutTiles[ts.f16, (2, 4, 8)], x: ts.Ref[ts.f16, ("A", "B", "C")], A: int, B: int, C: int):
    for idx in z.tiles(group=2):
        z.store(ts.load(x, idx, shape=(2, 4, 8)) * 2.0, idx)


def test_tiles_rank_3(backend):
    x = rand(np.random.default_rng(81), (5, 9, 17), "f16")
    got = launch(copy_3d, ts.empty((5, 9, 17), ts.f16), (2, 4, 8), ts.tensor(x))
    assert np.array_equal(got, x * np.float16(2))


@ts.kernel
def append_rows(z: ts.MutTiles[ts.f32, (1, "BN")], x: ts.Ref[ts.f32, ("T", "N")], start: int, count: int,
                BN: ts.Const[int], T: int, N: int):
    for idx in z.tiles(within=[(start, count), (0, ts.num_tiles(x.partition((1, BN)), 1))]):
        z.store(ts.load(x, (idx[0] - start, idx[1]), shape=(1, BN)), idx)


@pytest.mark.parametrize("start,count", [(0, 1), (3, 2), (9, 1), (8, 5), (12, 3)])
def test_window_writes_only_its_tiles_and_masks_past_the_end(backend, start, count):
    rng = np.random.default_rng(82)
    x = rand(rng, (count, 37), "f32")
    z, poison = poisoned((10, 37), "f32", 999.0)
    got = launch(append_rows, z, (1, 16), ts.tensor(x), start, count)
    want = poison.copy()
    rows = [r for r in range(start, start + count) if r < 10]
    for r in rows:
        want[r] = x[r - start]
    assert np.array_equal(got, want)


@ts.kernel
def append_at_device_position(z: ts.MutTiles[ts.f32, (1, 8)], x: ts.Ref[ts.f32, (1, "N")],
                              pos: ts.Ref[ts.i32, (1,)], one: ts.Ref[ts.i32, (1,)], N: int):
    for idx in z.tiles(within=[(pos, one), (0, 4)]):
        z.store(ts.load(x, (0, idx[1]), shape=(1, 8)), idx)


def test_window_bounds_from_one_element_tensors(backend):
    rng = np.random.default_rng(83)
    x = rand(rng, (1, 30), "f32")
    z, poison = poisoned((6, 30), "f32", 999.0)
    got = launch(append_at_device_position, z, (1, 8), ts.tensor(x), ts.tensor(np.array([4], np.int32)),
                 ts.tensor(np.array([1], np.int32)))
    want = poison.copy()
    want[4] = x[0]
    assert np.array_equal(got, want)


# --- subtiles -----------------------------------------------------------------------------
@ts.kernel
def rms_norm(y: ts.Mut[ts.f32, (1, "BH")], x: ts.Ref[ts.f32, ("M", "H")], w: ts.Ref[ts.f32, ("H",)],
             BH: ts.Const[int], SUB: ts.Const[int], M: int, H: int, eps: float):
    px = x.partition((1, SUB))
    pw = w.partition((SUB,))
    row = ts.block_id(0)
    ss = ts.zeros((1, SUB), ts.f32)
    for j in range(ts.num_tiles(px, 1)):
        t = px.load((row, j))
        ss = ss + t * t
    r = ts.rsqrt(ts.sum(ss) / H + eps)
    for j in y.subtiles((1, SUB)):
        y.store(px.load((row, j[1])) * r * pw.load((j[1],)), j)


@pytest.mark.parametrize("h,tile,sub", [(100, 512, 64), (128, 512, 64), (300, 512, 64), (1000, 1024, 256),
                                        (2560, 4096, 512)])
def test_subtiles_rms_norm(backend, h, tile, sub):
    rng = np.random.default_rng(84)
    x, w = rand(rng, (5, h), "f32"), rand(rng, h, "f32")
    got = launch(rms_norm, ts.empty((5, h)), (1, tile), ts.tensor(x), ts.tensor(w), SUB=sub, eps=1e-6)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@ts.kernel
def subtile_tags(z: ts.Mut[ts.i32, (8, 8)], x: ts.Ref[ts.i32, ("M", "N")], M: int, N: int):
    for j in z.subtiles((4, 2)):
        i0, i1 = ts.block_id(0) * 2 + j[0], ts.block_id(1) * 4 + j[1]     # the sub-tile's global index
        z.store(ts.load(x, (i0, i1), shape=(4, 2)) + j[0] * 10 + j[1], j)
    for j in z.subtiles((8, 4)):
        z.store(z.load(j) * 2, j)                                          # reads back sub-tiles


def test_subtiles_cover_the_block_tile_and_read_back(backend):
    x = rand(np.random.default_rng(85), (13, 19), "i32", -100, 100)
    # S14 would accept ts.empty here (the first walk writes the block's tile whole before the
    # second reads it back: lang/coverage.py); the output starts poisoned so a missed sub-tile shows.
    z, _ = poisoned((13, 19), "i32")
    got = launch(subtile_tags, z, (8, 8), ts.tensor(x))
    r, c = np.meshgrid(np.arange(13), np.arange(19), indexing="ij")
    tag = ((r % 8) // 4) * 10 + (c % 8) // 2
    assert np.array_equal(got, (x + tag) * 2)


@ts.kernel
def persistent_gemm(c: ts.MutTiles[ts.f32, ("BM", "BN")], a: ts.Ref[ts.f32, ("M", "K")],
                    b: ts.Ref[ts.f32, ("K", "N")], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int],
                    M: int, N: int, K: int):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    for idx in c.tiles(group=2):
        acc = ts.zeros((BM, BN), ts.f32)
        for k in range(ts.num_tiles(pa, 1)):
            acc = ts.mma(pa.load((idx[0], k)), pb.load((k, idx[1])), acc)
        c.store(acc, idx)


def test_persistent_gemm_ragged(backend):
    rng = np.random.default_rng(86)
    a, b = rand(rng, (50, 37), "f32"), rand(rng, (37, 70), "f32")
    got = launch(persistent_gemm, ts.empty((50, 70)), (16, 32), ts.tensor(a), ts.tensor(b), BK=16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert (np.abs(got - a64 @ b64) <= 1e-5 * (np.abs(a64) @ np.abs(b64))).all()
