"""`first=` on a walk (`z.tiles(first=F)`, `z.scatter(rows, first=F)`): block F takes the walk's
first tile, the blocks rotated, so every tile is still written exactly once — whatever the grid
(smaller or larger than the tiles), on both CPU backends — and walks of one kernel can start on
different blocks. Which block took which tile is recorded by the kernel itself (an output of
block ids), against the rotation computed here. first= must be a compile-time int >= 0."""
import numpy as np
import pytest
from lang_helpers import assert_diagnostic

import tilesafe as ts

HERE = __file__


@ts.kernel
def who(a: ts.MutTiles[ts.i32, (4,)], b: ts.MutTiles[ts.i32, (4,)], c: ts.MutTiles[ts.i32, (4,)],
        rows: ts.Ref[ts.i32, ("R",)], FB: ts.Const[int], FC: ts.Const[int], R: int):
    me = ts.full((4,), 1, ts.i32) * ts.block_id(0)
    for i in a.tiles():
        a.store(me, i)
    for i in b.tiles(first=FB):
        b.store(me, i)
    for j in c.scatter(rows, first=FC):
        c.store(me, j)


def owners(tiles: int, grid: int, first: int) -> np.ndarray:
    """The block of each tile: block p takes tiles (p - first) mod grid, + grid, + 2 grid, ..."""
    return np.repeat([(t + first) % grid for t in range(tiles)], 4).astype(np.int32)


@pytest.mark.parametrize("grid", [1, 3, 7, 12])
def test_each_walk_starts_at_its_first_block_and_writes_every_tile_once(backend, grid):
    a, b, c = (ts.full((n,), -1, ts.i32) for n in (16, 20, 8))
    rows = ts.tensor(np.arange(8, dtype=np.int32)[::-1].copy())
    who.launch(a.partition((4,)), b.partition((4,)), c.partition((4,)), rows, FB=4, FC=9, grid=(grid,)).sync()
    np.testing.assert_array_equal(a.numpy(), owners(4, grid, 0))
    np.testing.assert_array_equal(b.numpy(), owners(5, grid, 4))
    np.testing.assert_array_equal(c.numpy(), owners(2, grid, 9)[::-1])   # row i lands at 7 - i


def test_first_must_be_a_compile_time_int():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (4,)], N: int):
            for i in z.tiles(first=N):  # E:first-runtime
                z.store(ts.zeros((4,), ts.f32), i)
    assert_diagnostic(ei.value, HERE, "E:first-runtime", "first= of a walk must be a compile-time int >= 0")


def test_first_must_not_be_negative():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (4,)], rows: ts.Ref[ts.i32, ("N",)], N: int):
            for j in z.scatter(rows, first=-1):  # E:first-negative
                z.store(ts.zeros((4,), ts.f32), j)
        k.checks(ts.spec((8,), ts.f32, tile=(4,)), ts.spec((8,), ts.i32))
    assert_diagnostic(ei.value, HERE, "E:first-negative",
                      "first= of a walk must be a compile-time int >= 0, got int -1")


def test_first_is_a_block_id_below_2_31():
    """A larger first= would reach the Triton backend as an out-of-range literal (a Triton
    compile error rather than ours); first % grid names the same block anyway."""
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (4,)]):
            for i in z.tiles(first=2**70):  # E:first-huge
                z.store(ts.zeros((4,), ts.f32), i)
        k.checks(ts.spec((8,), ts.f32, tile=(4,)))
    assert_diagnostic(ei.value, HERE, "E:first-huge", "first= of a walk names a block, so it is below 2**31")


def test_a_walk_names_its_keywords():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (4,)]):
            for i in z.tiles(start=1):  # E:tiles-keyword
                z.store(ts.zeros((4,), ts.f32), i)
    assert_diagnostic(ei.value, HERE, "E:tiles-keyword", "z.tiles() takes only the keywords group=, within= and first=")
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def s(z: ts.MutTiles[ts.f32, (4,)], rows: ts.Ref[ts.i32, ("N",)], N: int):
            for j in z.scatter(rows, rows, first=1):  # E:scatter-args
                z.store(ts.zeros((4,), ts.f32), j)
        s.checks(ts.spec((8,), ts.f32, tile=(4,)), ts.spec((8,), ts.i32))
    assert_diagnostic(ei.value, HERE, "E:scatter-args",
                      "`z.scatter(rows)` takes one argument: the index tensor of output rows (and first=)")
