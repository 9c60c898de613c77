"""S14 through control flow: which stores make an output written, and which reads need it initialised.

An output stored on both branches of an `if`, or in a `range` loop with compile-time bounds
that runs, is written afterwards: the kernel may read it back and the host may read it after
the launch. Inside a `tiles` or `subtiles` walk a tile stored at the walk's index may be read
back at that index. The unsafe neighbours stay refused: a store on one branch only, in a loop
that may run zero times, or a read at another index than the one stored.
"""
import sys

import numpy as np
import pytest
from lang_helpers import INTERNAL_NAMES, rand

import tilesafe as ts

UNWRITTEN = "is read, but it came from ts.empty and has not been written"


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def assert_refused_read(e, kernel: str, line: int) -> None:
    """The launch-time S14 refusal: class, message, help and the launching line."""
    assert isinstance(e, ts.OwnershipError), type(e)
    assert f"argument `z` of `{kernel}` {UNWRITTEN}" in e.message, e.message
    assert "ts.zeros" in e.help
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == line, str(e)
    assert not any(name in str(e) for name in INTERNAL_NAMES), str(e)


def assert_host_read_refused(t: ts.Tensor) -> None:
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        t.numpy()


# --- item 5: both branches of an `if` ---------------------------------------------------------------
@ts.kernel
def both_branches(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    if ts.block_id(0) % 2 == 0:              # both branches run in one launch
        z.store(t * 2.0)
    else:
        z.store(t - 1.0)
    z.store(z.load() + 0.5)                  # reads what this block just wrote


@ts.kernel
def both_branches_no_reload(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], flag: int,
                            B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    if flag > 0:
        z.store(t * 3.0)
    else:
        z.store(t + 3.0)


def _blockwise(x, tile, even, odd):
    out = np.empty_like(x)
    for b, start in enumerate(range(0, x.size, tile)):
        part = x[start:start + tile]
        out[start:start + tile] = even(part) if b % 2 == 0 else odd(part)
    return out


def test_an_output_stored_on_both_branches_can_be_read_back(backend):
    x = rand(np.random.default_rng(150), 70, "f32")
    p = ts.empty(70).partition((16,))
    both_branches(p, ts.tensor(x)).sync()
    got = p.unpartition().numpy()                                 # the host read is accepted too
    want = _blockwise(x, 16, lambda v: v * np.float32(2), lambda v: v - np.float32(1)) + np.float32(0.5)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("flag", [1, 0])
def test_an_output_stored_on_both_branches_is_written_after_the_launch(backend, flag):
    x = rand(np.random.default_rng(151), 50, "f32")
    p = ts.empty(50).partition((16,))
    both_branches_no_reload(p, ts.tensor(x), flag).sync()
    want = x * np.float32(3) if flag else x + np.float32(3)
    np.testing.assert_array_equal(p.unpartition().numpy(), want)


@ts.kernel
def one_branch_then_reload(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], flag: int,
                           B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    if flag > 0:
        z.store(t)
    else:
        t = t * 2.0                          # assigns, but does not store
    z.store(z.load() + t)


@ts.kernel
def one_branch(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], flag: int, B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    if flag > 0:
        z.store(t)
    else:
        if flag < -5:
            z.store(t)                       # a nested branch: still not every path


def test_a_store_on_one_branch_only_does_not_make_a_read_back_safe(backend):
    x = ts.tensor(rand(np.random.default_rng(152), 32, "f32"))
    p = ts.empty(32).partition((16,))
    with pytest.raises(ts.TileSafeError) as info:
        one_branch_then_reload(p, x, 1)
    assert_refused_read(info.value, "one_branch_then_reload", here() - 1)
    assert_host_read_refused(p.unpartition())                    # the refused launch wrote nothing


def test_a_store_on_one_branch_only_leaves_the_output_unwritten(backend):
    x = ts.tensor(rand(np.random.default_rng(153), 32, "f32"))
    p = ts.empty(32).partition((16,))
    one_branch(p, x, 1).sync()                                   # this launch took the storing branch,
    assert_host_read_refused(p.unpartition())                    # but another may not have


# --- item 5: loops ---------------------------------------------------------------------------------
@ts.kernel
def static_loop(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], R: ts.Const[int], B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    acc = t
    for k in range(1, R + 1):
        z.store(acc)                         # the last iteration's store stays: R * t
        acc = acc + t
    z.store(z.load() - 1.0)


@pytest.mark.parametrize("reps", [1, 3])
def test_a_store_in_a_compile_time_range_that_runs_counts_as_written(backend, reps):
    x = rand(np.random.default_rng(154), 45, "f32")
    p = ts.empty(45).partition((16,))
    static_loop(p, ts.tensor(x), R=reps).sync()
    want = x.copy()
    for _ in range(reps - 1):
        want = want + x                                          # the same f32 additions, in order
    np.testing.assert_array_equal(p.unpartition().numpy(), want - np.float32(1))


def test_a_compile_time_range_that_is_empty_writes_nothing(backend):
    x = ts.tensor(rand(np.random.default_rng(155), 32, "f32"))
    p = ts.empty(32).partition((16,))
    with pytest.raises(ts.TileSafeError) as info:
        static_loop(p, x, R=0)
    assert_refused_read(info.value, "static_loop", here() - 1)


@ts.kernel
def dynamic_loop(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], n: int, B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    for k in range(n):                       # may run zero times
        z.store(t)
    z.store(z.load() + 1.0)


@ts.kernel
def dynamic_loop_no_reload(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], n: int, B: ts.Const[int],
                           N: int):
    t = ts.load_tile_like(x, z)
    k = 0
    while k < n:
        z.store(t)
        k = k + 1


def test_a_store_in_a_loop_that_may_not_run_does_not_count(backend):
    x = ts.tensor(rand(np.random.default_rng(156), 32, "f32"))
    p = ts.empty(32).partition((16,))
    with pytest.raises(ts.TileSafeError) as info:
        dynamic_loop(p, x, 2)
    assert_refused_read(info.value, "dynamic_loop", here() - 1)
    dynamic_loop_no_reload(p, x, 2).sync()                       # ran, but nothing proves it did
    assert_host_read_refused(p.unpartition())


# --- item 6: read back at the walk's index ---------------------------------------------------------
@ts.kernel
def tiles_reload(z: ts.MutTiles[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int],
                 BN: ts.Const[int], M: int, N: int):
    for idx in z.tiles(group=2):
        z.store(ts.load(x, idx, shape=(BM, BN)) * 2.0, idx)
        for k in range(2):
            z.store(z.load(idx) + 1.0, idx)  # reads back the tile this block just stored


@pytest.mark.parametrize("grid", [None, 1, 7])
def test_a_persistent_walk_reads_back_the_tile_it_stored(backend, grid):
    x = rand(np.random.default_rng(157), (21, 40), "f32")
    p = ts.empty((21, 40)).partition((8, 16))
    if grid is None:
        tiles_reload(p, ts.tensor(x)).sync()
    else:
        tiles_reload.launch(p, ts.tensor(x), grid=grid).sync()
    np.testing.assert_array_equal(p.unpartition().numpy(), x * np.float32(2) + np.float32(1) + np.float32(1))


@ts.kernel
def tiles_reload_first(z: ts.MutTiles[ts.f32, (8,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    for idx in z.tiles():
        t = z.load(idx)                      # before anything was stored at idx
        z.store(t + ts.load(x, idx, shape=(8,)), idx)


@ts.kernel
def tiles_reload_after_branch(z: ts.MutTiles[ts.f32, (8,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    for idx in z.tiles():
        t = ts.load(x, idx, shape=(8,))
        if idx[0] % 2 == 0:
            z.store(t, idx)                  # only the even tiles
        z.store(z.load(idx) * 2.0, idx)


@pytest.mark.parametrize("kernel", [tiles_reload_first, tiles_reload_after_branch], ids=lambda k: k.name)
def test_a_persistent_read_back_without_a_store_at_that_index_is_refused(backend, kernel):
    x = ts.tensor(rand(np.random.default_rng(158), 40, "f32"))
    p = ts.empty(40).partition((8,))
    with pytest.raises(ts.TileSafeError) as info:
        kernel(p, x)
    assert_refused_read(info.value, kernel.name, here() - 1)


@ts.kernel
def subtiles_reload(z: ts.Mut[ts.i32, (8, 8)], x: ts.Ref[ts.i32, ("M", "N")], M: int, N: int):
    for j in z.subtiles((4, 2)):
        i0, i1 = ts.block_id(0) * 2 + j[0], ts.block_id(1) * 4 + j[1]
        z.store(ts.load(x, (i0, i1), shape=(4, 2)) * 3, j)
        z.store(z.load(j) + j[1], j)         # the sub-tile just stored, same index
    z.store(z.load() - 1)                     # the walk wrote the whole tile


def test_a_subtile_walk_reads_back_what_it_stored_and_then_the_whole_tile(backend):
    x = rand(np.random.default_rng(159), (13, 19), "i32", -100, 100)
    p = ts.empty((13, 19), ts.i32).partition((8, 8))
    subtiles_reload(p, ts.tensor(x)).sync()
    col = np.arange(19)
    np.testing.assert_array_equal(p.unpartition().numpy(), x * 3 + (col % 8) // 2 - 1)


@ts.kernel
def subtiles_other_index(z: ts.Mut[ts.i32, (8,)], x: ts.Ref[ts.i32, ("N",)], N: int):
    for j in z.subtiles((4,)):
        z.store(ts.load(x, (ts.block_id(0) * 2 + j[0],), shape=(4,)), j)
        for k in z.subtiles((4,)):
            z.store(z.load(k) + 1, j)        # k is another sub-tile than j on some iterations


@ts.kernel
def subtiles_one_branch(z: ts.Mut[ts.i32, (8,)], x: ts.Ref[ts.i32, ("N",)], N: int):
    for j in z.subtiles((4,)):
        if j[0] == 0:
            z.store(ts.load(x, (ts.block_id(0) * 2 + j[0],), shape=(4,)), j)
    z.store(z.load() + 1)                     # the walk did not store every sub-tile


@pytest.mark.parametrize("kernel", [subtiles_other_index, subtiles_one_branch], ids=lambda k: k.name)
def test_a_subtile_read_of_elements_not_stored_first_is_refused(backend, kernel):
    x = ts.tensor(rand(np.random.default_rng(160), 16, "i32", -9, 9))
    p = ts.empty(16, ts.i32).partition((8,))
    with pytest.raises(ts.TileSafeError) as info:
        kernel(p, x)
    assert_refused_read(info.value, kernel.name, here() - 1)


def test_the_refused_kernels_run_on_an_initialised_output(backend):
    # The refusals above are about initialisation only: from ts.zeros the same kernels run.
    x = rand(np.random.default_rng(161), 16, "i32", -9, 9)
    p = ts.zeros(16, ts.i32).partition((8,))
    subtiles_one_branch(p, ts.tensor(x)).sync()
    want = np.zeros(16, np.int32)
    for b in range(2):
        want[b * 8:b * 8 + 4] = x[b * 8:b * 8 + 4]
    np.testing.assert_array_equal(p.unpartition().numpy(), want + 1)


# --- the group's tile: both branches inside `if ts.last_arrival():` --------------------------------
@ts.kernel
def group_total(c: ts.MutLast[ts.f32, (1,)], part: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, (-1,)],
                both: ts.Const[bool], B: ts.Const[int]):
    part.store(ts.load_tile_like(x, part))
    if ts.last_arrival():
        acc = ts.zeros((1,), ts.f32)
        for m in part.members():
            acc = acc + ts.sum(part.load(m))
        if ts.sum(acc) > 0.0:
            c.store(acc)
        elif both:
            c.store(-acc)


@pytest.mark.parametrize("sign", [1, -1])
def test_a_group_tile_stored_on_both_branches_is_written(backend, sign):
    x = rand(np.random.default_rng(162), 300, "f32") + np.float32(sign * 4)    # the sum's sign picks the branch
    c, part = ts.empty((1,)), ts.empty(300)
    pc, pp = c.partition((1,)), part.partition((128,))
    group_total(pc, pp, ts.tensor(x), both=True).sync()
    pc.unpartition(), pp.unpartition()
    np.testing.assert_allclose(c.numpy(), [abs(x.sum(dtype=np.float64))], rtol=1e-5)


def test_a_group_tile_stored_on_one_branch_stays_unwritten(backend):
    x = rand(np.random.default_rng(163), 300, "f32") + np.float32(4)
    c, part = ts.empty((1,)), ts.empty(300)
    pc, pp = c.partition((1,)), part.partition((128,))
    group_total(pc, pp, ts.tensor(x), both=False).sync()            # stored, but not on every path
    assert_host_read_refused(pc.unpartition())
    np.testing.assert_array_equal(pp.unpartition().numpy(), x)      # the members' tiles are written
