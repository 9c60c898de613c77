"""Which `StorageState` owns which bytes of memory: an interval map keyed by address.

Storage identity comes from the memory, not from torch's storage objects: two torch storages
over the same bytes (a DLPack round trip, `torch.from_numpy(np.from_dlpack(t))`, storage
tricks) must find the same state, or a write through one would reach bytes lent or pending
through the other. Per device, the map keeps disjoint address ranges sorted by start; a
lookup is a binary search plus the few ranges that overlap.

An entry lives as long as one of the torch storages that joined it: each is held by a weak
reference, and when the last dies the entry goes, because allocators hand the same
addresses out again. A dying storage only queues its entry's check (a weakref callback may
run in the middle of a map update); every map operation first settles the queue, so no
lookup ever sees memory that was freed.

New memory a library call allocated for its result (torch's fresh bytes, which nothing else
addresses yet) is placed lazily (`place_later`): its state is cached on its storage at once,
and the map learns its range when any lookup next runs.
Only a lookup by address can find memory through the map (a second storage object over the
same bytes, e.g. a DLPack alias), and every lookup places the queue first; a temporary that
dies before then is never placed at all. So an eager call's result costs no map update, and
the queue keeps no state alive (a weak reference to the storage, which names its state).
"""
from __future__ import annotations

import bisect
import collections
import threading
import weakref
from typing import Protocol


class Entry(Protocol):
    """What the map needs of a state: where its bytes are and which storages hold them."""
    device: object        # a torch.device
    base: int | None
    nbytes: int
    _storages: list


PLACE_BATCH = 256     # new memory queued unplaced before the dead are dropped (place_later)


class _Held(weakref.ref):
    """A torch storage an entry holds weakly; when it dies, `entry` (a weak reference to the
    entry) is queued for its check (one object per storage, no closure)."""
    __slots__ = ("entry",)


class MemoryMap:
    def __init__(self):
        self.lock = threading.RLock()
        self._starts: dict = {}                       # torch.device -> sorted range starts
        self._entries: dict = {}                      # torch.device -> states, in the same order
        self._died: collections.deque = collections.deque()
        died = self._died
        self._on_death = lambda ref: died.append(ref.entry)   # made once: a weakref callback
        # Weak references to the storages of new memory not placed yet (place_later); a
        # storage's entry is its attribute named `attribute`. Checked for dead ones when the
        # queue reaches `_check_at`.
        self._placing: collections.deque = collections.deque()
        self._check_at = PLACE_BATCH
        self.attribute = None        # storage_state sets it: the attribute naming a storage's state
        # How an entry that meets a tracked range joins it (storage_state sets it: `_join`).
        self.merge = None

    def place_later(self, storage) -> None:
        """Place the entry of `storage` (its attribute, with device, base and bytes set)
        before the next lookup: new memory from an allocator, which no other storage object
        addresses yet. Placed as `insert_fresh` would place it, or merged by `merge` when it
        meets a tracked range; never placed when its storage dies first. The queue holds
        only a weak reference (no entry: a state lives as long as its memory), and a long
        queue drops its dead references but places nothing."""
        placing = self._placing
        placing.append(weakref.ref(storage))
        if len(placing) >= self._check_at:
            with self.lock:
                for _ in range(len(placing)):   # the live ones go back (appends meanwhile stay)
                    ref = placing.popleft()
                    if ref() is not None:
                        placing.append(ref)
                self._check_at = max(PLACE_BATCH, 2 * len(placing))

    def _place(self) -> None:
        """Place the queue (under the lock). It is emptied first: placing one entry is a map
        operation, which would otherwise place the rest from inside it (two frames per queued
        storage: RecursionError with some 500 live results queued). Should placing stop half
        way (an exception), the rest goes back to the queue: an unplaced state would never be
        found by address. Placing is idempotent (a placed entry holds its storage)."""
        placing = self._placing
        storages = []
        while placing:
            storage = placing.popleft()()
            if storage is not None:
                storages.append(storage)
        self._check_at = PLACE_BATCH
        i = 0
        try:
            for storage in storages:
                entry = getattr(storage, self.attribute, None)
                if entry is not None and not entry._storages and not self.insert_fresh(entry, storage):
                    self.merge(storage, entry)
                i += 1
        finally:
            if i < len(storages):
                placing.extend([weakref.ref(s) for s in storages[i:]])

    def overlapping(self, device, start: int, end: int) -> list[Entry]:
        """The live states whose range meets [start, end), in address order."""
        with self.lock:
            if self._placing:
                self._place()
            self._settle()
            starts, entries = self._starts.get(device, ()), self._entries.get(device, ())
            i = max(bisect.bisect_right(starts, start) - 1, 0)
            found = []
            while i < len(starts) and starts[i] < end:
                e = entries[i]
                if e.base + e.nbytes > start:
                    found.append(e)
                i += 1
            return found

    def insert_fresh(self, entry: Entry, storage) -> bool:
        """Place `entry` (its device, base and bytes set) and hold it by `storage`, when no
        entry meets its range; False (nothing done) when one does. New memory from an
        allocator (a library call's result, `ts.empty`) meets none: this is `overlapping`,
        `insert` and `hold` in one search, under one lock, with nothing to merge."""
        with self.lock:
            if self._placing:
                self._place()
            if self._died:
                self._settle()
            starts = self._starts.get(entry.device)
            if starts is None:
                starts, entries = self._starts[entry.device], self._entries[entry.device] = [], []
            else:
                entries = self._entries[entry.device]
            start = entry.base
            i = bisect.bisect_right(starts, start)
            if i and (e := entries[i - 1]).base + e.nbytes > start or \
                    i < len(starts) and starts[i] < start + entry.nbytes:
                return False     # ranges are disjoint and sorted: only these two can meet it
            starts.insert(i, start)
            entries.insert(i, entry)
            self.hold(entry, storage)
            return True

    def insert(self, entry: Entry) -> None:
        """Place `entry` where the caller found no live entry meeting it (`overlapping` just
        before, under the lock, which placed the queue)."""
        with self.lock:
            starts = self._starts.setdefault(entry.device, [])
            entries = self._entries.setdefault(entry.device, [])
            i = bisect.bisect_right(starts, entry.base)
            starts.insert(i, entry.base)
            entries.insert(i, entry)

    def remove(self, entry: Entry) -> None:
        """Take `entry` out (a no-op when it is not in the map)."""
        with self.lock:
            starts, entries = self._starts.get(entry.device, []), self._entries.get(entry.device, [])
            i = bisect.bisect_left(starts, entry.base)
            while i < len(starts) and starts[i] == entry.base:
                if entries[i] is entry:
                    del starts[i], entries[i]
                    return
                i += 1

    def hold(self, entry: Entry, storage) -> None:
        """Keep `entry` in the map while `storage` (a torch UntypedStorage) is alive."""
        held = _Held(storage, self._on_death)
        held.entry = weakref.ref(entry)
        entry._storages.append(held)

    def _settle(self) -> None:
        """Drop the entries whose storages all died (queued by the weakref callbacks)."""
        died = self._died
        while died:
            entry = died.popleft()()
            if entry is None:
                continue
            storages = entry._storages
            if len(storages) == 1:      # the common case: the one storage of new memory died
                if storages[0]() is None:
                    storages.clear()
            else:
                storages = entry._storages = [r for r in storages if r() is not None]
            if not storages:
                self.remove(entry)

    def __len__(self) -> int:
        with self.lock:
            if self._placing:
                self._place()
            self._settle()
            return sum(len(v) for v in self._entries.values())


MEMORY = MemoryMap()
