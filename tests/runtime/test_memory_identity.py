"""Storage identity comes from the memory (issue 15 item 3, issue 23 items 2, 3).

Two torch tensors over the same bytes — through DLPack, a NumPy round trip or a slice
alias — share one tilesafe state: lending (S8), initialisation (S14) and pending accesses
(S9) are by address, whichever torch storage object a handle came through. The state ends
when the memory is freed, so an allocator handing the address out again starts afresh.
"""
import gc
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesafe as ts
from tilesafe.runtime.memory_map import MEMORY
from tilesafe.runtime.storage_state import StorageState


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


# Ways to make a second torch tensor over the same memory; each gives a new storage object.
ALIASES = {
    "from_dlpack(t)": lambda t: torch.from_dlpack(t),
    "from_dlpack(capsule)": lambda t: torch.from_dlpack(t.__dlpack__()),
    "numpy round trip": lambda t: torch.from_numpy(np.from_dlpack(t)),
}


class FakeFuture:
    """Stands in for a launch's future: done once waited for."""
    def __init__(self):
        self.finished, self.waits = False, 0

    def done(self):
        return self.finished

    def wait(self):
        self.waits += 1
        self.finished = True


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
def test_an_alias_is_a_new_storage_object_but_finds_the_same_state(alias):
    t = torch.arange(64, dtype=torch.float32)
    x = ts.from_torch(t)
    a = alias(t)
    assert a.untyped_storage() is not t.untyped_storage()          # the case this is about
    assert StorageState.of(a) is x._state


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
def test_host_write_through_an_alias_of_lent_bytes_is_refused(alias):
    t = torch.zeros(64)
    p = ts.from_torch(t).partition((32,))
    y = ts.from_torch(alias(t))
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        y[3] = 1.0
    assert "cannot write through `x[...] = value`: its bytes are lent to a partition (lent at" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    assert "unpartition()" in info.value.help
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        y.partition((32,))                                         # S8: no second partition either
    assert t.sum().item() == 0.0                                   # a refusal writes nothing
    p.unpartition()
    y[3] = 1.0
    assert t[3].item() == 1.0


def test_an_alias_of_part_of_the_memory_joins_its_state_by_address():
    t = torch.zeros(64)
    p = ts.from_torch(t)[:32].partition((32,))
    y = ts.from_torch(torch.from_dlpack(t[16:48]))                 # bytes 64..191: half of it lent
    assert y._torch().storage_offset() == 0                        # offsets differ, addresses agree
    y[16:] = 5.0                                                   # t[32:48]: not lent
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        y[15] = 5.0                                                # t[31]: lent
    np.testing.assert_array_equal(t.numpy(), np.r_[np.zeros(32), np.full(16, 5.0), np.zeros(16)])
    p.unpartition()


def test_a_storage_over_several_tracked_ranges_merges_them(backend):
    base = torch.zeros(100)
    left = ts.from_torch(torch.from_dlpack(base[0:10]))
    right = ts.from_torch(torch.from_dlpack(base[50:60]))
    pl, pr = left.partition((8,)), right.partition((8,))
    whole = ts.from_torch(base)                                    # reaches both, and bytes neither tracks
    for i in (5, 55):
        with pytest.raises(ts.OwnershipError, match="lent to a partition"):
            whole[i] = 1.0
    whole[20:40] = 3.0
    x = ts.tensor(np.arange(10, dtype=np.float32))
    double(pl, x).sync()
    double(pr, x).sync()
    left, right = pl.unpartition(), pr.unpartition()
    expected = np.zeros(100, np.float32)
    expected[0:10] = expected[50:60] = np.arange(10) * 2.0
    expected[20:40] = 3.0
    np.testing.assert_array_equal(whole.numpy(), expected)
    whole[55] = 7.0                                                # given back: writable through any handle
    assert right.numpy()[5] == 7.0


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
def test_an_alias_of_unwritten_empty_memory_is_not_readable(alias):
    x = ts.empty(16)
    x[:8] = np.arange(8, dtype=np.float32)                         # moves x's version counter
    y = ts.from_torch(alias(x.to_torch()))
    np.testing.assert_array_equal(y[:8].numpy(), np.arange(8))
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        y.numpy()                                   # S14: y[8:] was never written
    assert "reads a tensor that came from ts.empty and has not been written" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_torch_writes_through_either_handle_make_handed_memory_readable():
    x = ts.empty(16)
    handed = x.to_torch()
    alias = torch.from_dlpack(handed)
    alias[8:].fill_(2.0)                                           # torch writes through the alias...
    handed[:8].fill_(1.0)                                          # ...and through the handed tensor
    np.testing.assert_array_equal(ts.from_torch(alias).numpy(), np.r_[np.ones(8), np.full(8, 2.0)])


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
def test_host_read_through_an_alias_waits_for_pending_writers(alias):
    t = torch.zeros(32)
    x = ts.from_torch(t)
    writer = FakeFuture()
    x._state.record(x[8:16]._byte_set(), True, writer)
    ts.from_torch(alias(t))[:8].numpy()                            # other bytes: no wait
    assert writer.waits == 0
    ts.from_torch(alias(t)).numpy()
    assert writer.waits == 1


@pytest.mark.parametrize("write", [
    lambda z, src: z.__setitem__(Ellipsis, src),
    lambda z, src: z.copy_(src),
    lambda z, src: ts.tensor(src),
    lambda z, src: ts.tensor(src.numpy()),                         # a NumPy view of the same memory
], ids=["setitem", "copy_", "ts.tensor", "ts.tensor(numpy)"])
def test_a_torch_source_with_a_pending_tilesafe_writer_is_waited_for(write):
    t = torch.zeros(32)
    x = ts.from_torch(t)
    writer, reader = FakeFuture(), FakeFuture()
    x._state.record(x._byte_set(), True, writer)
    x._state.record(x._byte_set(), False, reader)
    write(ts.zeros(32), t)                                         # reads t: waits for its writer only
    assert writer.waits == 1 and reader.waits == 0


def test_strict_sync_reports_the_wait_for_a_torch_source():
    t = torch.zeros(8)
    writer = FakeFuture()
    ts.from_torch(t)._state.record(ts.from_torch(t)._byte_set(), True, writer)
    z = ts.zeros(8)
    with ts.strict_sync():
        with pytest.raises(ts.OwnershipError) as info:
            line = here() + 1
            z[:] = t
    assert "an implicit wait on pending device work was needed for `x[...] = value`" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    assert writer.waits == 0


def test_a_torch_tensor_tilesafe_never_saw_makes_no_state():
    source = torch.ones(8)
    z = ts.zeros(8)
    z[:] = source
    assert StorageState.find(source) is None and getattr(source.untyped_storage(), "_tilesafe_state", None) is None


# -- the state ends with the memory ---------------------------------------------------------

def test_the_state_ends_when_the_last_storage_over_the_memory_is_freed():
    arr = np.zeros(256, np.float32)                                # memory that outlives the torch storages
    t = torch.from_numpy(arr)
    x = ts.from_torch(t)
    alias = torch.from_dlpack(t)
    ts.from_torch(alias)
    del x, t
    gc.collect()
    assert StorageState.find(alias) is not None                    # the alias still holds it
    del alias
    gc.collect()
    assert MEMORY.overlapping(torch.device("cpu"), arr.ctypes.data, arr.ctypes.data + arr.nbytes) == []
    assert StorageState.find(torch.from_numpy(arr)) is None        # same address, no inherited state


def test_a_reused_address_does_not_inherit_hand_over_or_initialisation():
    # Unwritten memory handed to torch and dropped, then the same address handed out again
    # (a NumPy buffer plays the allocator, so the address is certain): the new tensor's bytes
    # are torch's, fully readable, and nothing is lent there. A state that lived on would
    # still say "handed over, unwritten" and refuse the read.
    arr = np.full(4096, 3.0, np.float32)
    view = torch.from_numpy(arr)
    x = ts.Tensor(view, StorageState.attach(view, StorageState(arr.nbytes, initialised=False)))
    head = x[:1024]
    x.to_torch()
    p = head.partition((1024,))
    del x, view, head, p
    gc.collect()
    again = ts.from_torch(torch.from_numpy(arr))
    np.testing.assert_array_equal(again.numpy(), arr)
    again.partition((1024,)).unpartition()


def test_a_fresh_allocation_never_joins_a_dead_state():
    # A weakref callback may not have settled yet when the allocator hands the address out
    # again: fresh memory drops an entry whose storages are all dead instead of inheriting it.
    arr = np.zeros(64, np.float32)
    x = ts.from_torch(torch.from_numpy(arr))
    p = x.partition((64,))
    live = list(x._state._storages)
    x._state._storages[:] = [lambda: None]                        # as if its storage had died
    fresh = StorageState.attach(torch.from_numpy(arr), StorageState(256, initialised=False))
    assert fresh is not x._state and fresh.init_mask is not None
    assert fresh.lender_of(x._byte_set()) is None                  # the lending did not carry over
    x._state._storages[:] = live
    p.unpartition()


# -- merging, as a property ---------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 95), st.integers(1, 24), st.integers(0, 2**24 - 1)), min_size=1, max_size=5))
def test_merged_states_keep_every_byte_s_facts_and_the_map_stays_disjoint(pieces):
    # Pieces of one buffer tracked on their own (uninitialised, part written), then one storage
    # over the whole buffer: the merged state must know exactly what each piece knew, and
    # count the bytes no piece tracked as torch's (written).
    arr = np.zeros(128, np.float32)
    expected = np.ones(128, bool)                   # per element: written?
    covered = np.zeros(128, bool)
    held = []
    for start, length, bits in pieces:
        stop = min(start + length, 128)
        if covered[start:stop].any():
            continue                                # overlaps an earlier piece: a piece is fresh memory
        covered[start:stop] = True
        view = torch.from_numpy(arr[start:stop])
        state = StorageState.attach(view, StorageState(view.untyped_storage().nbytes(), initialised=False))
        flags = np.array([(bits >> i) & 1 for i in range(stop - start)], bool)
        state.mark_elements_written(view, torch.from_numpy(flags))
        expected[start:stop] = flags
        held.append(ts.Tensor(view, state))
    whole = torch.from_numpy(arr)
    merged = StorageState.of(whole)                 # joins without marking anything written
    assert all(t._state.__dict__ is merged.__dict__ for t in held)
    np.testing.assert_array_equal(merged.written_elements(whole).numpy(), expected)
    entries = MEMORY.overlapping(torch.device("cpu"), 0, 2**64)
    starts, ends = [e.base for e in entries], [e.base + e.nbytes for e in entries]
    assert starts == sorted(starts) and all(a <= b for a, b in zip(ends, starts[1:]))


# -- new memory: placed in one step, or merged when it meets tracked bytes ----------------------

def test_new_memory_meeting_a_tracked_range_merges_with_it_instead_of_a_fresh_entry():
    # attach places new memory in one step (MemoryMap.insert_fresh) only where no entry meets
    # its range; memory that does meet one (here a view over tracked bytes, as a widened merged
    # state's freed part handed out again would) joins that state as any storage does.
    arr = np.zeros(64, np.float32)
    tracked = ts.from_torch(torch.from_numpy(arr[0:16]))
    p = tracked.partition((16,))
    view = torch.from_numpy(arr[8:40])
    state = StorageState.attach(view, StorageState(view.untyped_storage().nbytes()))
    assert state.__dict__ is tracked._state.__dict__               # one state: the lending is seen
    assert state.lender_of(ts.Tensor(view, state)._byte_set()) is p
    entries = MEMORY.overlapping(torch.device("cpu"), arr.ctypes.data, arr.ctypes.data + arr.nbytes)
    assert len(entries) == 1 and entries[0].nbytes == 40 * 4
    p.unpartition()


def test_insert_fresh_places_only_memory_that_meets_no_entry():
    class Entry:
        def __init__(self, base, nbytes):
            self.device, self.base, self.nbytes, self._storages = "test", base, nbytes, []
    from tilesafe.runtime.memory_map import MemoryMap
    m = MemoryMap()
    holder = torch.empty(1).untyped_storage()
    assert m.insert_fresh(Entry(100, 50), holder)
    for base, nbytes in ((60, 41), (149, 10), (120, 5), (90, 100)):
        assert not m.insert_fresh(Entry(base, nbytes), holder)     # meets [100, 150)
    assert m.insert_fresh(Entry(150, 10), holder) and m.insert_fresh(Entry(50, 50), holder)
    assert [(e.base, e.nbytes) for e in m.overlapping("test", 0, 1000)] == [(50, 50), (100, 50), (150, 10)]


# -- a library call's new result: placed in the map before the next lookup ----------------------

def _eager_results(n: int) -> list:
    """`n` eager rms_norm results (from the third call on, the plan's fast form allocates them)."""
    import tilesafe.kernels as tk
    w = torch.rand(32)
    with ts.backend("reference"):
        return [tk.rms_norm(torch.rand(2, 32), w) for _ in range(n)]


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
def test_an_eager_result_is_found_through_an_alias_before_anything_looked_it_up(alias):
    y = _eager_results(5)[-1]
    state = y.untyped_storage()._tilesafe_state
    a = alias(y)                                                   # the first lookup by address
    assert StorageState.of(a) is state
    p = ts.from_torch(y).partition((1, 32))
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        ts.from_torch(a)[0, 0] = 1.0                               # S8 through the alias
    assert "its bytes are lent to a partition" in info.value.message and info.value.loc.line == line
    p.unpartition()


def test_eager_results_that_die_unplaced_leave_no_entry_behind():
    from tilesafe.runtime import memory_map
    gc.collect()
    before = len(MEMORY)
    for _ in range(3):
        del _eager_results(memory_map.PLACE_BATCH // 2)[:]          # more than a batch in all, all dropped
    gc.collect()
    assert len(MEMORY._placing) <= memory_map.PLACE_BATCH
    assert len(MEMORY) == before


def test_the_queue_keeps_no_state_alive_and_live_results_stay_findable():
    import weakref
    from tilesafe.runtime import memory_map
    y = _eager_results(5)[-1]
    gone = weakref.ref(y.untyped_storage()._tilesafe_state)
    del y
    gc.collect()
    assert gone() is None                                          # no lookup ran: only the queue saw it
    kept = _eager_results(memory_map.PLACE_BATCH + 50)             # live across the queue's check
    states = [t.untyped_storage()._tilesafe_state for t in kept]
    for t, state in zip(kept[::60], states[::60]):
        assert StorageState.of(torch.from_dlpack(t)) is state      # a lookup by address finds each


def test_new_memory_placed_late_that_meets_a_tracked_range_merges_when_placed():
    # As attach's new memory that meets a tracked range (a widened merged state's freed part
    # handed out again): placed late, it joins that state at the next lookup, lending seen.
    arr = np.zeros(64, np.float32)
    tracked = ts.from_torch(torch.from_numpy(arr[0:16]))
    p = tracked.partition((16,))
    view = torch.from_numpy(arr[8:40])
    storage = view.untyped_storage()
    state = StorageState.attach_new(storage, storage.nbytes(), view.data_ptr())
    assert state.__dict__ is not tracked._state.__dict__            # not placed yet
    entries = MEMORY.overlapping(torch.device("cpu"), arr.ctypes.data, arr.ctypes.data + arr.nbytes)
    assert state.__dict__ is tracked._state.__dict__                # the lookup placed it: one state
    assert len(entries) == 1 and entries[0].nbytes == 40 * 4
    assert state.lender_of(ts.Tensor(view, state)._byte_set()) is p
    p.unpartition()


def test_many_live_results_queued_are_placed_without_recursion():
    # Placing one queued result runs a map operation, which placed the rest of the queue from
    # inside it: one nested pair of frames per live queued result, so ~500 results kept alive
    # (a list of eager outputs) made the next lookup raise RecursionError, and the results it
    # had popped were never placed: an alias of them then got a state of its own (S8/S9 missed).
    kept = [torch.rand(4) for _ in range(sys.getrecursionlimit())]
    states = []
    for t in kept:
        storage = t.untyped_storage()
        states.append(StorageState.attach_new(storage, storage.nbytes(), storage.data_ptr()))
    for t, state in zip(kept[::97], states[::97]):
        assert StorageState.of(torch.from_dlpack(t)) is state      # the first lookup places them all
    assert all(state._storages for state in states)                # each one placed
