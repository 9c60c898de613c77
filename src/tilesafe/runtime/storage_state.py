"""What tilesafe knows about one piece of memory, shared by every view of it.

Two facts live here, because both are about bytes rather than about handles:
- S14, which bytes were ever written (`init_mask`), so nothing reads memory nobody wrote;
- S9/S10, which launches still read or write which bytes (the pending-access registry),
  so host and device accesses wait for the conflicting work before them;
and S8's lending by bytes.

A state is found by the memory (device, address range), through `memory_map.MEMORY`, not by
torch's storage object: two storages over the same bytes (a DLPack alias, a NumPy round
trip) share one state, with byte positions translated by address. A storage that joins a
state also caches it as an attribute, so finding it again costs one getattr. The state
ends when the last storage that joined it is freed (allocators reuse addresses).
"""
from __future__ import annotations

import sys
import threading
import weakref
from typing import Any, NamedTuple, Protocol

import torch

from ..errors import OwnershipError, caller_loc
from ..settings import strict_var
from .aliasing import ByteSet, byte_set, overlaps
from .memory_map import MEMORY
from .torch_version import version_of

# Attribute name on torch.UntypedStorage: a cache of the state found by address. Torch keeps
# a storage's Python object (and so this attribute) alive as long as any tensor uses it.
STATE_ATTR = "_tilesafe_state"


class Future(Protocol):
    """What the registry needs of a launch's future."""
    def done(self) -> bool: ...
    def wait(self) -> Any: ...


class PendingAccess(NamedTuple):
    """One pending access (a named tuple: every launch makes one per argument, and a frozen
    dataclass took twice as long to build)."""
    byteset: ByteSet
    is_write: bool
    future: Future
    standing: bool = False    # a graph's access, registered once for all its replays (`stand`)


_new_access = tuple.__new__

# Bumped whenever any registry gains pending work (a record, a graph replay, a merge): a graph
# whose stream saw no change since its last replay was already ordered after everything pending.
_changes = 0


def registry_version() -> int:
    """A number that changes whenever some storage gains pending work."""
    return _changes


def registry_changed() -> None:
    """New pending work that no registry entry shows by itself (a graph's standing access now
    stands for a newer replay)."""
    global _changes
    _changes += 1


class StorageState:
    """Initialisation tracking (S14), lending (S8) and pending device accesses (S9) of one
    range of memory."""

    # One lock over every state's pending registry (launches record under the runtime's lock
    # already; this one guards a registry's updates from other readers), not a lock per state:
    # a library call's new output makes a state, and a lock each cost an allocation per call.
    _lock = threading.RLock()

    def __init__(self, nbytes: int, initialised: bool = True):
        # One flag per byte of the range, on the CPU so that marking never waits on a GPU;
        # None once every byte was written (the common case costs nothing).
        self.init_mask: torch.Tensor | None = (
            None if initialised or nbytes == 0 else torch.zeros(nbytes, dtype=torch.bool))
        self._pending: list[PendingAccess] = []
        # The one stream every pending access was recorded on, else None: a launch on that
        # stream is ordered after them by the stream itself (order_device has nothing to do).
        self.pending_stream: int | None = None
        self.device: torch.device | None = None    # where the range is, once placed in the memory map
        self.base: int | None = None               # address of its first byte (None: not placed)
        self.nbytes = nbytes
        self._storages: list = []                  # weakrefs to the torch storages that joined it
        self.own_write_version: int | None = None  # torch version counter after tilesafe's last host write
        self._lent: list = []                      # (ByteSet or None, weakref to Partition): bytes lent (S8)
        self.handed_version: int | None = None     # torch version counter when last handed to torch (to_torch)
        self.handed: tuple | None = None           # (weakref to the torch tensor, to its storage) then
        self.frozen: list = []                     # [start, end) addresses no launch may write (ts.freeze)

    # -- finding the state of some memory -------------------------------------------------

    @staticmethod
    def of(view: torch.Tensor) -> "StorageState":
        """The state of the memory under `view`'s storage: the one any other storage over
        those bytes found, or a new one (fully initialised) on first use."""
        storage = view.untyped_storage()
        state = getattr(storage, STATE_ATTR, None)
        if state is None:
            state = _join(storage, None)
        return state

    @staticmethod
    def of_storage(storage) -> "StorageState":
        """`of` for a torch storage in hand (`view.untyped_storage()`)."""
        state = getattr(storage, STATE_ATTR, None)
        if state is None:
            state = _join(storage, None)
        return state

    @staticmethod
    def find(view: torch.Tensor) -> "StorageState | None":
        """The state of `view`'s memory if tilesafe has one, without making one (for torch
        tensors that may alias tilesafe memory)."""
        storage = view.untyped_storage()
        state = getattr(storage, STATE_ATTR, None)
        if state is not None or storage.nbytes() == 0:
            return state
        start = storage.data_ptr()
        found = MEMORY.overlapping(storage.device, start, start + storage.nbytes())
        return _join(storage, None) if any(e._alive() for e in found) else None

    @staticmethod
    def attach(view: torch.Tensor, state: "StorageState") -> "StorageState":
        """Make `state` the state of `view`'s storage, freshly allocated memory."""
        return StorageState.attach_storage(view.untyped_storage(), state)

    @staticmethod
    def attach_storage(storage, state: "StorageState") -> "StorageState":
        """`attach` for a torch storage in hand. New memory meets no tracked range (an
        allocator hands out no live bytes twice), so it is placed in the map in one step;
        a range that meets one (a dead entry not yet settled, a widened merged state) takes
        `_join`, which merges or drops it as for any other storage."""
        if state.nbytes and state.nbytes == storage.nbytes():
            state.device, state.base = storage.device, storage.data_ptr()
            if MEMORY.insert_fresh(state, storage):
                setattr(storage, STATE_ATTR, state)
                return state
            state.device = state.base = None
        return _join(storage, state)

    @staticmethod
    def attach_new(storage, nbytes: int, address: int) -> "StorageState":
        """The state of memory a library call just allocated for its result (`storage`:
        `nbytes` at `address`, torch's new bytes, all written): cached on the storage now,
        placed in the memory map before its next lookup (`MemoryMap.place_later`). Nothing
        else addresses these bytes yet, and any other storage object over them finds the
        state through a lookup, which places it first."""
        state = StorageState(nbytes)
        if not nbytes:
            return _join(storage, state)       # no bytes to share: a state of its own
        state.device, state.base = storage.device, address
        setattr(storage, STATE_ATTR, state)
        MEMORY.place_later(storage)
        return state

    # -- growing over more memory ----------------------------------------------------------

    def _alive(self) -> bool:
        """Some torch storage that joined this state still holds its memory."""
        return any(r() is not None for r in self._storages)

    def _absorb(self, device: torch.device, lo: int, hi: int, others: list["StorageState"]) -> None:
        """Cover [lo, hi) and take over `others` (states of memory inside it).

        Bytes only `others` knew keep their facts; bytes nobody tracked are torch's and count
        as written. Each absorbed object then shares this one's attributes (`__dict__`), so
        tensors and cached launches that hold it see the merged state, not a stale copy.
        """
        if not others and lo == self.base and hi - lo == self.nbytes:
            return                            # the storage lies inside: nothing to widen
        parts = [self, *others]
        if any(p.init_mask is not None for p in parts):
            mask = torch.ones(hi - lo, dtype=torch.bool)
            for p in parts:
                if p.init_mask is not None:
                    mask[p.base - lo:p.base - lo + p.nbytes] = p.init_mask
            self.init_mask = None if bool(mask.all()) else mask
        self.device, self.base, self.nbytes = device, lo, hi - lo
        registry_changed()                    # pending work joins other bytes' registry
        for o in others:
            self._pending.extend(o._pending)
            self.pending_stream = None
            self._lent.extend(o._lent)
            self.frozen.extend(o.frozen)
            for ref in o._storages:
                storage = ref()
                if storage is not None:
                    MEMORY.hold(self, storage)
                    setattr(storage, STATE_ATTR, self)
            if self.handed is None:
                self.handed, self.handed_version, self.own_write_version = \
                    o.handed, o.handed_version, o.own_write_version
            o.__dict__ = self.__dict__

    # -- S14: initialisation --------------------------------------------------------------

    def mark_written(self, view: torch.Tensor) -> None:
        """Record that every byte `view` covers now holds a written value."""
        if self.init_mask is None:
            return
        if self._covers_all(view):
            self.init_mask = None
            return
        self._bytes_of(view).fill_(True)
        self._drop_mask_when_full()

    def mark_elements_written(self, view: torch.Tensor, flags: torch.Tensor) -> None:
        """Like `mark_written`, for the elements of `view` where `flags` (shape of view) is True."""
        if self.init_mask is None:
            return
        self._bytes_of(view)[flags.to("cpu", torch.bool)] = True   # writes through to the mask
        self._drop_mask_when_full()

    def is_written(self, view: torch.Tensor) -> bool:
        """True when every byte `view` covers was written."""
        if self.init_mask is None:
            return True
        return bool(self._bytes_of(view).all())

    def written_elements(self, view: torch.Tensor) -> torch.Tensor:
        """Per element of `view`, whether all its bytes were written (a CPU bool tensor)."""
        if self.init_mask is None:
            return torch.ones(view.shape, dtype=torch.bool)
        return self._bytes_of(view).all(dim=-1)

    def _drop_mask_when_full(self) -> None:
        if bool(self.init_mask.all()):
            self.init_mask = None

    def _offset_of(self, view: torch.Tensor) -> int:
        """Byte position of `view`'s first element in this state's range (by address)."""
        offset = view.storage_offset() * view.element_size()   # not data_ptr(): it is 0 for empty views
        if self.base is None:
            return offset                                       # a state never placed in the map
        return view.untyped_storage().data_ptr() + offset - self.base

    def _bytes_of(self, view: torch.Tensor) -> torch.Tensor:
        """The mask entries `view`'s elements cover: shape (*view.shape, itemsize)."""
        item = view.element_size()
        offset = self._offset_of(view)
        last = sum((n - 1) * s for n, s in zip(view.shape, view.stride())) * item + item
        if view.numel() and (offset < 0 or offset + last > self.nbytes):
            # e.g. a reshape that copied: its offsets would index the wrong bytes
            raise ValueError("internal: the view is not on this StorageState's storage (its memory)")
        return self.init_mask.as_strided((*view.shape, item), (*(s * item for s in view.stride()), 1), offset)

    def _covers_all(self, view: torch.Tensor) -> bool:
        return (view.is_contiguous() and self._offset_of(view) == 0
                and view.numel() * view.element_size() == self.nbytes)

    # -- frozen bytes (ts.freeze, runtime/freeze.py) -----------------------------------------

    # How many ranges ts.freeze has recorded in all: a captured graph's replay checks its writes
    # against frozen bytes only when this moved since its last check (graph.Graph.replay).
    freezes = 0

    def freeze_range(self, start: int, end: int) -> None:
        """Record the addresses [start, end) as frozen (ts.freeze, after its checks and waits)."""
        self.frozen.append((start, end))
        StorageState.freezes += 1

    def frozen_meets(self, bs: ByteSet) -> bool:
        """Some byte between the byte set `bs`'s first and last is frozen."""
        return bool(self.frozen) and bs.numel != 0 and any(bs.start < b and a < bs.end for a, b in self.frozen)

    def frozen_covers(self, view: torch.Tensor) -> bool:
        """Every byte `view` reaches (from its first to its last) lies in one frozen range."""
        if not self.frozen or view.numel() == 0:
            return False
        bs = byte_set(view)
        return any(a <= bs.start and bs.end <= b for a, b in self.frozen)

    def touches_frozen(self, view: torch.Tensor) -> bool:
        """Some byte between `view`'s first and last is frozen: a write of it is refused."""
        return bool(self.frozen) and view.numel() != 0 and self.frozen_meets(byte_set(view))

    # -- S13/S14: memory handed to torch ----------------------------------------------------

    def hand_over(self, t: torch.Tensor) -> None:
        """`t` (a view of this memory) goes to torch (`to_torch()`); remember how to tell later
        whether torch wrote it."""
        self.handed_version = version_of(t)
        self.handed = (weakref.ref(t), weakref.ref(t.untyped_storage()))

    def torch_wrote(self, t: torch.Tensor) -> bool:
        """Best-effort: are `t`'s bytes torch's? True unless this memory was handed to torch
        and no version counter shows a torch write since: the handed tensor's, or `t`'s own
        (a DLPack alias has its own counter, counting from 0)."""
        if self.handed is None:
            return True                       # torch made these bytes
        ours = (self.handed_version, self.own_write_version)
        tensor_ref, storage_ref = self.handed
        handed = tensor_ref()
        if handed is not None and version_of(handed) not in ours:
            return True
        if t.untyped_storage() is storage_ref():
            return version_of(t) not in ours
        return version_of(t) != 0

    # -- S8: bytes lent to partitions ------------------------------------------------------

    def lend(self, byteset: ByteSet | None, partition) -> None:
        """Lend bytes to `partition`: `byteset`, or None for all its tensor reaches (the byte
        set is made when `lender_of` first needs it: most lendings end unasked)."""
        self._lent.append((byteset, weakref.ref(partition)))

    def unlend(self, partition) -> None:
        """The partition gave its bytes back: drop its entry, so that lending the memory
        again finds nothing lent and builds no byte set."""
        lent = self._lent
        for i in range(len(lent) - 1, -1, -1):
            if lent[i][1]() is partition:
                del lent[i]
                return

    def lender_of(self, byteset: ByteSet):
        """The live partition holding bytes that overlap `byteset`, or None. Lent bytes are
        writable only through their partition, whichever handle asks (S8 by bytes)."""
        live = []
        found = None
        for bs, ref in self._lent:
            p = ref()
            if p is None or not p._live:
                continue
            if bs is None:
                bs = byte_set(p._tensor._torch())
            live.append((bs, ref))
            if found is None and overlaps(bs, byteset):
                found = p
        self._lent = live
        return found

    # -- S9/S10: pending accesses ---------------------------------------------------------

    def record(self, byteset: ByteSet, is_write: bool, future: Future) -> None:
        """Register a launch's access to `byteset`, pending until `future.done()`.

        A later access of the same bytes, kind and stream supersedes an earlier one (the
        stream runs them in order), so repeated launches keep the registry small. A graph's
        standing access is never superseded: its next replay comes after this launch.
        """
        record_launch((self,), (byteset,), (is_write,), future, getattr(future, "stream", None))

    def stand(self, byteset: ByteSet, is_write: bool, future: Future) -> None:
        """Register a graph's access once for all its replays on one stream: `future` (the
        graph's `Standing`) answers for its latest replay there, and the entry stays while
        the graph lives (`future.live`), so a replay costs no registry work."""
        registry_changed()
        with self._lock:
            stream = getattr(future, "stream", None)
            if not self._pending:
                self.pending_stream = stream
            elif self.pending_stream != stream:
                self.pending_stream = None
            self._pending.append(PendingAccess(byteset, is_write, future, True))

    def order_device(self, byteset: ByteSet, write: bool, stream: int) -> None:
        """S10: make the current stream (raw handle `stream`) wait for conflicting pending
        accesses on other streams. Work on the same stream is ordered by the stream itself,
        so it costs nothing here."""
        for p in self._pending:
            other = getattr(p.future, "stream", None)
            if other is not None and other != stream and (write or p.is_write) \
                    and not p.future.done() and overlaps(p.byteset, byteset):
                import torch
                torch.cuda.current_stream().wait_event(p.future.ready_event())

    def pending_conflicts(self, byteset: ByteSet, write: bool) -> list[Future]:
        """Unfinished futures an access to `byteset` must be ordered after: writers for a
        read; readers and writers for a write."""
        with self._lock:
            self._pending = [p for p in self._pending if _kept(p)]
            return [p.future for p in self._pending
                    if (write or p.is_write) and overlaps(p.byteset, byteset)
                    and not (p.standing and p.future.done())]

    def wait_for_host(self, byteset: ByteSet, write: bool, what: str) -> None:
        """Block the host until the conflicting pending accesses finished (S9).

        Inside `ts.strict_sync()` a wait that would block is an OwnershipError instead.
        """
        conflicts = self.pending_conflicts(byteset, write)
        if conflicts and strict_var.get() and not all(f.done() for f in conflicts):
            raise OwnershipError(
                f"an implicit wait on pending device work was needed for {what}",
                loc=caller_loc(),
                help="call fut.sync() on the launch that uses this tensor first "
                     "(implicit waits are errors inside ts.strict_sync())")
        for future in conflicts:
            future.wait()
        self.pending_conflicts(byteset, write)   # prune what just finished


def record_launch(states, bytesets, writes, future: Future, stream) -> None:
    """`StorageState.record` of one launch's accesses, one per argument: `states[k]` gains
    (`bytesets[k]`, write `writes[k]`), pending until `future` (on raw stream `stream`) is
    done. One call per launch instead of one per argument."""
    global _changes
    _changes += 1
    with StorageState._lock:                      # the one lock of every registry: taken once a launch
        for state, byteset, is_write in zip(states, bytesets, writes):
            # Built without the named tuple's Python-level constructor (one per argument per launch).
            entry = _new_access(PendingAccess, (byteset, is_write, future, False))
            pending = state._pending
            if not pending:
                state.pending_stream = stream
            elif state.pending_stream != stream:
                state.pending_stream = None
            i = 0
            for bs, w, f, standing in pending:   # cheapest tests first; a launcher reuses its byte sets
                if w == is_write and (bs is byteset or bs == byteset) and not standing \
                        and getattr(f, "stream", None) == stream:
                    pending[i] = entry            # the entry of the same bytes, kind and stream, in place
                    break
                i += 1
            else:
                if len(pending) >= 32:
                    pending[:] = [p for p in pending if _kept(p)]
                pending.append(entry)


def record_launch_source(states: list, sets: str | list, writes: tuple, future: str, stream: str) -> list:
    """`record_launch(states, sets, writes, future, stream)` as lines of Python for a launcher
    that writes its steps out per layout (planned_unrolled.py): `states`: the expressions of
    the states; `sets`: the name of the list of byte sets (indexed per state), or one
    expression per state; `writes`: the write flags (bools, constants of the layout);
    `future`, `stream`: names. Needs `record_launch_names()` in its
    namespace. The same steps, per state."""
    lines = ["SS._changes += 1",
             "with SS.StorageState._lock:"]
    set_of = sets if isinstance(sets, (list, tuple)) else [f"{sets}[{k}]" for k in range(len(states))]
    for state, is_write, byteset in zip(states, writes, set_of):
        w = repr(bool(is_write))
        lines += [f"    b = {byteset}",
                  f"    entry = _new_access(PendingAccess, (b, {w}, {future}, False))",
                  f"    pending = {state}._pending",
                  "    if not pending:",
                  f"        {state}.pending_stream = {stream}",
                  f"    elif {state}.pending_stream != {stream}:",
                  f"        {state}.pending_stream = None",
                  "    i = 0",
                  "    for bs, w, f, standing in pending:",
                  f"        if w == {w} and (bs is b or bs == b) and not standing \\",
                  f"                and getattr(f, 'stream', None) == {stream}:",
                  "            pending[i] = entry",
                  "            break",
                  "        i += 1",
                  "    else:",
                  "        if len(pending) >= 32:",
                  "            pending[:] = [p for p in pending if _kept(p)]",
                  "        pending.append(entry)"]
    return lines


def _kept(p: PendingAccess) -> bool:
    """Pruning keeps unfinished accesses, and a live graph's standing ones (finished or not)."""
    return (p.standing and p.future.live) or not p.future.done()


def record_launch_names() -> dict:
    """The names `record_launch_source`'s lines use, for the namespace they are compiled in."""
    return {"SS": sys.modules[__name__], "PendingAccess": PendingAccess, "_new_access": _new_access, "_kept": _kept}


def _join(storage, fresh: StorageState | None) -> StorageState:
    """The state `storage`'s memory joins: `fresh` for a new allocation, else the state of the
    memory it overlaps (widened and merged when it overlaps several, or reaches past one),
    else a new fully initialised one."""
    n, device = storage.nbytes(), storage.device   # a torch.device: hashable, cheap
    if n == 0:                         # no bytes to share: a state of its own, outside the map
        state = fresh if fresh is not None else StorageState(0)
        setattr(storage, STATE_ATTR, state)
        return state
    start = storage.data_ptr()
    with MEMORY.lock:
        if fresh is None:
            # Memory borrowed for the first time (a torch tensor's new storage object): when no
            # tracked range meets it, one search places a fully initialised state (insert_fresh,
            # as the merge below would place it, without the lookups of a merge).
            state = StorageState(n)
            state.device, state.base = device, start
            if MEMORY.insert_fresh(state, storage):
                setattr(storage, STATE_ATTR, state)
                return state
        found = []
        for e in MEMORY.overlapping(device, start, start + n):
            if e._alive():
                found.append(e)
            else:   # its storages all died (freed memory, callback not yet settled): never inherit it
                MEMORY.remove(e)
        if fresh is not None and not found:      # the common case: new memory, nothing to merge
            fresh.device, fresh.base = device, start
            MEMORY.insert(fresh)
            MEMORY.hold(fresh, storage)
            setattr(storage, STATE_ATTR, fresh)
            return fresh
        if fresh is not None:
            state, others = fresh, found     # new memory overlaps only memory that shares it
            state.device, state.base = device, start
        elif found:
            state, others = found[0], found[1:]
        else:
            state, others = StorageState(n), []
            state.device, state.base = device, start
        for e in (state, *others):
            MEMORY.remove(e)
        lo = min([start, *(e.base for e in others), state.base])
        hi = max([start + n, *(e.base + e.nbytes for e in others), state.base + state.nbytes])
        state._absorb(device, lo, hi, others)
        MEMORY.insert(state)
        MEMORY.hold(state, storage)
        setattr(storage, STATE_ATTR, state)
        return state


MEMORY.merge = _join     # new memory placed late that meets a tracked range joins it as attach would
MEMORY.attribute = STATE_ATTR
