"""S8: partitions lend their tensor exclusively; tile validation; grids."""
import gc
import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesafe import dtypes
from tilesafe.errors import LaunchError, OwnershipError
from tilesafe.runtime.constructors import zeros
from tilesafe.runtime.partition import Partition


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


# -- tiles and grids ---------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=3), st.data())
def test_grid_is_ceil_of_shape_over_tile(shape, data):
    tile = tuple(data.draw(st.sampled_from([1, 2, 4, 16, 64, 128])) for _ in shape)
    p = zeros(tuple(shape)).partition(tile)
    assert p.grid == tuple(math.ceil(n / t) for n, t in zip(shape, tile))
    assert p.tile == tile and p.shape == tuple(shape) and p.dtype is dtypes.f32
    assert p.prefix is False


def test_tile_may_be_a_list_and_numpy_ints():
    assert zeros((10, 10)).partition([np.int64(4), 8]).tile == (4, 8)


def test_partition_prefix_is_marked():
    p = zeros(100, dtypes.bf16).partition_prefix((32,))
    assert p.prefix is True and p.grid == (4,) and p.dtype is dtypes.bf16


@pytest.mark.parametrize("shape, tile, fragment, hint", [
    ((100,), (96,), "tile entry 0 is 96, not a positive power of two", "use 128, the next power of two"),
    ((100, 8), (64, 3), "tile entry 1 is 3, not a positive power of two", "use 4"),
    ((100,), (0,), "tile entry 0 is 0", "use 1"),
    ((100,), (-4,), "tile entry 0 is -4", "use 1"),
    ((100,), (2.0,), "tile entry 0 is 2.0, not an int", "powers of two"),
    ((100,), (True,), "tile entry 0 is True, not an int", "powers of two"),
    ((100, 8), (64,), "tile (64,) has 1 entries but the tensor has 2 axes", "one tile size per axis"),
    ((100,), 100, "a tile must be a tuple", "(128,)"),
    ((), (), "only tensors of rank 1 to 3 can be partitioned", "reshape"),
    ((2, 2, 2, 2), (1, 1, 1, 1), "this one has rank 4", "reshape"),
])
def test_bad_tiles_are_launch_errors_naming_the_entry(shape, tile, fragment, hint):
    t = zeros(shape)
    with pytest.raises(LaunchError) as info:
        t.partition(tile)
    assert fragment in info.value.message
    assert hint in info.value.help
    t.numpy()                                               # a refused partition lends nothing


@pytest.mark.parametrize("equal, fragment", [((True,), "tile entry 0 is True"), ((1.0,), "tile entry 0 is 1.0")])
def test_a_tile_equal_to_one_checked_before_is_still_checked_by_its_entries(equal, fragment):
    # Checked tiles are kept by (tile, shape), and (True,) == (1.0,) == (1,) as keys: such a
    # tile must still be refused as the first check refuses it, at the caller's line.
    t = zeros(100)
    t.partition((1,)).unpartition()
    with pytest.raises(LaunchError) as info:
        line = here() + 1
        t.partition(equal)
    assert fragment in info.value.message and "not an int" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    t.numpy()


def test_the_tile_object_checked_last_is_checked_again_for_a_shape_of_another_rank():
    # The tuple checked last passes again by identity only for a shape of its rank.
    tile = (4,)
    zeros(8).partition(tile).unpartition()
    zeros(8).partition(tile).unpartition()                  # found by identity now
    with pytest.raises(LaunchError) as info:
        line = here() + 1
        zeros((8, 8)).partition(tile)
    assert info.value.message == "tile (4,) has 1 entries but the tensor has 2 axes (8, 8)"
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_the_lending_place_is_each_call_s_own_line():
    # `place` keeps which code objects are tilesafe's: the line is still read from each frame.
    t = zeros(8)
    lines = []
    for _ in range(2):
        p = t.partition((8,)); lines.append(here())        # noqa: E702
        with pytest.raises(OwnershipError, match=f"lent at {__file__}:{lines[-1]}"):
            t.numpy()
        p.unpartition()
    p = t.partition((8,)); other = here()                 # noqa: E702
    with pytest.raises(OwnershipError, match=f"lent at {__file__}:{other}"):
        t.numpy()
    p.unpartition()


# -- lending -----------------------------------------------------------------------------

USES = [
    ("numpy()", lambda t: t.numpy()),
    ("shape", lambda t: t.shape),
    ("dtype", lambda t: t.dtype),
    ("x[...]", lambda t: t[0]),
    ("x[...] = value", lambda t: t.__setitem__(0, 1.0)),
    ("copy_()", lambda t: t.copy_(np.ones(8))),
    ("view()", lambda t: t.view(2, 4)),
    ("to_torch()", lambda t: t.to_torch()),
    ("to_torch()", lambda t: t.to_torch(copy=True)),
    ("str()", lambda t: str(t)),
    ("len()", lambda t: len(t)),
    ("partition()", lambda t: t.partition((4,))),
    ("partition_prefix()", lambda t: t.partition_prefix((4,))),
]


@pytest.mark.parametrize("what, use", USES, ids=[f"{i}-{w}" for i, (w, _) in enumerate(USES)])
def test_every_use_of_a_lent_tensor_names_where_it_was_lent(what, use):
    t = zeros(8)
    p, line = t.partition((4,)), here()
    with pytest.raises(OwnershipError) as info:
        use(t)
    err = info.value
    assert f"cannot use `{what}`: this tensor is lent to a partition (lent at {__file__}:{line})" in err.message
    assert ".unpartition()" in err.help
    assert err.loc.file == __file__                         # points at the misuse, not inside tilesafe
    assert "tilesafe" not in str(err).split("-->")[1].split("\n")[0]
    assert p.unpartition() is t
    use(t)                                                  # given back: usable again


def test_unpartition_returns_the_same_object_with_the_same_bytes():
    t = zeros(8)
    t[:] = np.arange(8)
    p = t.partition((4,))
    assert p._tensor is t and p._tensor._torch() is t._torch()   # internal access is not refused
    assert p.unpartition() is t
    np.testing.assert_array_equal(t.numpy(), np.arange(8))


def test_a_partition_is_dead_after_unpartition():
    p = zeros(8).partition((4,))
    _, line = p.unpartition(), here()
    for use in (lambda: p.grid, lambda: p.tile, lambda: p.shape, lambda: p.dtype,
                lambda: p.prefix, lambda: p.unpartition(), lambda: p._check_live()):
        with pytest.raises(OwnershipError) as info:
            use()
        assert f"this partition was unpartitioned at {__file__}:{line}" in info.value.message
        assert "partition it again" in info.value.help
    assert p._live is False
    assert "unpartitioned at" in repr(p)


def test_a_tensor_can_be_partitioned_again_after_unpartition():
    t = zeros((8, 8))
    t.partition((4, 4)).unpartition()
    assert t.partition((8, 2)).grid == (1, 4)


def test_a_dropped_partition_ends_the_lending():
    t = zeros(8)
    t.partition((4,))
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.zeros(8))


def test_views_taken_before_partitioning_stay_usable():
    # S8 is per handle; bytes are protected by S7 (launch) and S9 (host ordering) instead.
    t = zeros(8)
    v = t[:4]
    p = t.partition((4,))
    np.testing.assert_array_equal(v.numpy(), np.zeros(4))
    p.unpartition()


def test_repr_of_a_lent_tensor_does_not_raise_and_says_why():
    t = zeros(8)
    p = t.partition((4,))
    assert "lent to a partition" in repr(t)
    assert repr(p) == "Partition(shape=(8,), tile=(4,), grid=(2,), dtype=ts.f32, kind=partition)"
    assert isinstance(p, Partition)
