"""S14: nothing reads bytes nobody wrote; tracking is per byte of the storage."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesafe import dtypes
from tilesafe.errors import OwnershipError
from tilesafe.runtime.constructors import arange, empty, from_torch, full, ones, rand, tensor, zeros
from tilesafe.runtime.storage_state import StorageState


READS = [
    ("numpy()", lambda t: t.numpy()),
    ("to_torch(copy=True)", lambda t: t.to_torch(copy=True)),
    ("numpy()", lambda t: str(t)),
    ("numpy()", lambda t: np.asarray(t)),
    ("ts.tensor()", lambda t: tensor(t)),
    ("x[...] = value", lambda t: zeros(t.shape).__setitem__(Ellipsis, t)),
]


@pytest.mark.parametrize("what, read", READS, ids=[f"{i}-{w}" for i, (w, _) in enumerate(READS)])
def test_reading_an_unwritten_empty_tensor_is_refused(what, read):
    t = empty((2, 3))
    with pytest.raises(OwnershipError) as info:
        read(t)
    assert f"`{what}` reads a tensor that came from ts.empty and has not been written" in info.value.message
    assert "ts.zeros" in info.value.help and "kernel" in info.value.help
    assert info.value.loc.file == __file__


def test_repr_of_an_unwritten_tensor_does_not_raise():
    assert "has not been written" in repr(empty(3))


def test_partial_writes_make_exactly_those_elements_readable():
    t = empty(10)
    t[:5] = np.arange(5)
    np.testing.assert_array_equal(t[:5].numpy(), np.arange(5))
    for unread in (t, t[4:6], t[9]):
        with pytest.raises(OwnershipError, match="has not been written"):
            unread.numpy()
    t[5:] = 7.0
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3, 4, 7, 7, 7, 7, 7])
    assert t._state.init_mask is None                       # fully written: tracking dropped


def test_strided_writes_are_tracked_per_element():
    t = empty((4, 6))
    t[:, 0::2] = 1.0
    t[:, 0::2].numpy()
    with pytest.raises(OwnershipError):
        t[:, 1::2].numpy()
    t.T[1::2] = 2.0                                         # the odd columns, through a transpose
    expected = np.tile([1.0, 2.0], (4, 3)).astype(np.float32)
    np.testing.assert_array_equal(t.numpy(), expected)


def test_copy_and_view_writes_count():
    t = empty((2, 4))
    t.view(8).copy_(np.arange(8))
    np.testing.assert_array_equal(t.numpy(), np.arange(8).reshape(2, 4))


def test_tracking_is_by_bytes_across_dtypes():
    storage = torch.zeros(4)                                # 16 bytes
    state = StorageState(16, initialised=False)
    state.mark_written(storage.view(torch.int16)[1:3])      # bytes 2..5
    assert state.is_written(storage.view(torch.uint8)[2:6])
    assert not state.is_written(storage[0:1])               # bytes 0..3: 0, 1 unwritten
    assert not state.is_written(storage.view(torch.uint8)[1:3])
    state.mark_written(storage.view(torch.int16)[0:1])      # bytes 0..1
    assert state.is_written(storage[0:1])
    assert not state.is_written(storage[1:2])               # bytes 6, 7 still unwritten
    state.mark_written(storage[1:])
    assert state.init_mask is None and state.is_written(storage)


def test_a_launch_marks_what_its_partition_covers():
    t = empty(16)
    t._state.mark_written(t._torch()[:8])                    # what the launcher does
    t[:8].numpy()
    t._state.mark_written(t._torch())
    assert t._state.init_mask is None
    t.numpy()


@pytest.mark.parametrize("make", [lambda: zeros(4), lambda: ones(4), lambda: full(4, 2.0),
                                  lambda: arange(4), lambda: rand(4), lambda: tensor([1, 2]),
                                  lambda: from_torch(torch.empty(4))])
def test_other_constructors_are_fully_initialised(make):
    assert make()._state.init_mask is None


def test_every_dtype_is_tracked_in_bytes():
    for dt in (dtypes.f32, dtypes.bf16, dtypes.f8e4m3fn, dtypes.i64, dtypes.bool_):
        t = empty(6, dt)
        assert t._state.init_mask.shape == (6 * dt.itemsize,)
        t[1:] = 1
        with pytest.raises(OwnershipError):
            t.numpy()
        t[0] = 0
        np.testing.assert_array_equal(t.numpy(), np.array([0, 1, 1, 1, 1, 1], dt.np))


def test_an_empty_tensor_of_no_elements_is_readable():
    assert empty((0, 3)).numpy().shape == (0, 3)


def test_empty_can_be_handed_to_torch_to_be_filled_there():
    t = empty(4)
    shared = t.to_torch()                                   # a hand-over, not a read
    shared.copy_(torch.arange(4.0))
    np.testing.assert_array_equal(from_torch(shared).numpy(), np.arange(4))


# -- property: random slice writes against a NumPy model of "written" -------------------------

slices = st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(1, 5)).map(lambda a: slice(*a))


@settings(max_examples=50, deadline=None)
@given(st.lists(slices, max_size=6), st.lists(slices, min_size=1, max_size=4))
def test_readability_matches_a_model_of_written_elements(writes, reads):
    t = empty(40, dtypes.bf16)
    written = np.zeros(40, bool)
    for s in writes:
        t[s] = 1.0
        written[s] = True
    for s in reads:
        if written[s].all():
            t[s].numpy()
        else:
            with pytest.raises(OwnershipError):
                t[s].numpy()
    assert (t._state.init_mask is None) == bool(written.all())


def test_per_element_flags_for_the_sanitizer():
    t = empty((3, 4), dtypes.bf16)
    view = t._torch().t()                                   # (4, 3), strided
    flags = torch.zeros(4, 3, dtype=torch.bool)
    flags[1, 2] = flags[3, 0] = True
    t._state.mark_elements_written(view, flags)
    assert torch.equal(t._state.written_elements(view), flags)
    assert torch.equal(t._state.written_elements(t._torch()), flags.t())
    t._state.mark_elements_written(view, ~flags)
    assert t._state.init_mask is None
    assert bool(t._state.written_elements(view).all())


def test_a_view_on_another_storage_is_an_internal_error():
    t = empty((4, 4))
    copy = t._torch().t().reshape(-1)                       # reshape of a transpose copies
    with pytest.raises(ValueError, match="not on this StorageState's storage"):
        t._state.is_written(copy)
