"""What tilesafe knows about one storage, shared by every view of it.

Two facts live here, because both are about bytes rather than about handles:
- S14, which bytes were ever written (`init_mask`), so nothing reads memory nobody wrote;
- S9/S10, which launches still read or write which bytes (the pending-access registry),
  so host and device accesses wait for the conflicting work before them.

The state is attached to torch's storage object, so every view of a storage — including
one that went out to torch and came back through `ts.from_torch` — finds the same state.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..errors import OwnershipError, caller_loc
from ..settings import strict_var
from .aliasing import ByteSet, overlaps

# Attribute name on torch.UntypedStorage; torch keeps a storage's Python object (and so
# this attribute) alive as long as any tensor uses the storage.
_ATTR = "_tilesafe_state"


class Future(Protocol):
    """What the registry needs of a launch's future."""
    def done(self) -> bool: ...
    def wait(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class PendingAccess:
    byteset: ByteSet
    is_write: bool
    future: Future


class StorageState:
    """Initialisation tracking (S14) and pending device accesses (S9) of one storage."""

    def __init__(self, nbytes: int, initialised: bool = True):
        # One flag per byte of the allocation, on the CPU so that marking never waits on
        # a GPU; None once every byte was written (the common case costs nothing).
        self.init_mask: torch.Tensor | None = (
            None if initialised or nbytes == 0 else torch.zeros(nbytes, dtype=torch.bool))
        self._pending: list[PendingAccess] = []
        self._lock = threading.Lock()
        self._storage_ptr: int | None = None      # set once attached to a storage
        self.own_write_version: int | None = None  # torch version counter after tilesafe's last host write
        self._lent: list = []                      # (ByteSet, weakref to Partition): bytes lent (S8)
        self.handed_version: int | None = None     # torch version counter when last handed to torch (to_torch)

    # -- finding the state of a storage ---------------------------------------------------

    @staticmethod
    def of(view: torch.Tensor) -> "StorageState":
        """The state of `view`'s storage, made (fully initialised) on first use."""
        storage = view.untyped_storage()
        state = getattr(storage, _ATTR, None)
        if state is None:
            state = StorageState.attach(view, StorageState(storage.nbytes()))
        return state

    @staticmethod
    def attach(view: torch.Tensor, state: "StorageState") -> "StorageState":
        """Make `state` the state of `view`'s (fresh) storage."""
        storage = view.untyped_storage()
        setattr(storage, _ATTR, state)
        state._storage_ptr = storage.data_ptr()
        return state

    # -- S14: initialisation --------------------------------------------------------------

    def mark_written(self, view: torch.Tensor) -> None:
        """Record that every byte `view` covers now holds a written value."""
        if self.init_mask is None:
            return
        if _covers_whole_storage(view):
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

    def _bytes_of(self, view: torch.Tensor) -> torch.Tensor:
        """The mask entries `view`'s elements cover: shape (*view.shape, itemsize)."""
        if self._storage_ptr is not None and view.untyped_storage().data_ptr() != self._storage_ptr:
            # e.g. a reshape that copied: its offsets would index the wrong bytes
            raise ValueError("internal: the view is not on this StorageState's storage")
        item = view.element_size()
        offset = view.storage_offset() * item     # not data_ptr(): it is 0 for empty views
        return self.init_mask.as_strided((*view.shape, item), (*(s * item for s in view.stride()), 1), offset)

    # -- S8: bytes lent to partitions ------------------------------------------------------

    def lend(self, byteset: ByteSet, partition) -> None:
        import weakref
        self._lent.append((byteset, weakref.ref(partition)))

    def lender_of(self, byteset: ByteSet):
        """The live partition holding bytes that overlap `byteset`, or None. Lent bytes are
        writable only through their partition, whichever handle asks (S8 by bytes)."""
        live = []
        found = None
        for bs, ref in self._lent:
            p = ref()
            if p is None or not p._live:
                continue
            live.append((bs, ref))
            if found is None and overlaps(bs, byteset):
                found = p
        self._lent = live
        return found

    # -- S9/S10: pending accesses ---------------------------------------------------------

    def record(self, byteset: ByteSet, is_write: bool, future: Future) -> None:
        """Register a launch's access to `byteset`, pending until `future.done()`.

        A later access of the same bytes, kind and stream supersedes an earlier one (the
        stream runs them in order), so repeated launches keep the registry small.
        """
        stream = getattr(future, "stream", None)
        with self._lock:
            pending = self._pending
            for i, p in enumerate(pending):
                if p.is_write == is_write and getattr(p.future, "stream", None) == stream and \
                        (p.byteset is byteset or p.byteset == byteset):
                    pending[i] = PendingAccess(byteset, is_write, future)
                    return
            if len(pending) >= 32:
                pending[:] = [p for p in pending if not p.future.done()]
            pending.append(PendingAccess(byteset, is_write, future))

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
            self._pending = [p for p in self._pending if not p.future.done()]
            return [p.future for p in self._pending
                    if (write or p.is_write) and overlaps(p.byteset, byteset)]

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


def _covers_whole_storage(view: torch.Tensor) -> bool:
    storage = view.untyped_storage()
    return (view.is_contiguous() and view.storage_offset() == 0
            and view.numel() * view.element_size() == storage.nbytes())

