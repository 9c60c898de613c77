"""A simple model of the host runtime's rules, for the runtime fuzzer (test_runtime_fuzz.py).

It knows nothing of tilesafe: storages are arrays of float32 values with a written flag per
element (S14); a handle is a list of element positions of one storage (a view); a partition
lends its handle's elements (S8); a handle handed to torch with `to_torch()` is unusable
(S13); torch tensors and their DLPack aliases reach the same elements. Each `check_*`
returns the set of error classes the runtime may raise for that step — empty when the step
must be accepted (several classes when several rules are broken at once and the model does
not fix which one the runtime checks first). On CPU every launch has finished when it
returns, so nothing is pending (S9); the GPU tests cover ordering.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OWNERSHIP, ALIAS = "OwnershipError", "AliasError"


@dataclass
class Storage:
    values: np.ndarray                    # float32, one per element
    written: np.ndarray                   # bool, one per element (S14)


@dataclass
class Handle:
    storage: int
    elems: np.ndarray                     # element positions in the storage, in view order
    handed: bool = False                  # to_torch() handed it over (S13)
    lent_to: int | None = None            # the live partition made from this handle (S8)


@dataclass
class Part:
    handle: int
    tile: int
    live: bool = True


@dataclass
class TorchAlias:
    storage: int
    elems: np.ndarray


@dataclass
class Model:
    storages: list[Storage] = field(default_factory=list)
    handles: list[Handle] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)
    torch: list[TorchAlias] = field(default_factory=list)

    # -- making things ----------------------------------------------------------------------
    def new_storage(self, values: np.ndarray, written: bool) -> int:
        self.storages.append(Storage(values.astype(np.float32), np.full(values.shape, written)))
        self.handles.append(Handle(len(self.storages) - 1, np.arange(values.size)))
        return len(self.handles) - 1

    def new_handle(self, storage: int, elems: np.ndarray) -> int:
        self.handles.append(Handle(storage, np.asarray(elems, np.int64)))
        return len(self.handles) - 1

    # -- what is lent -----------------------------------------------------------------------
    def lent_elems(self, storage: int) -> np.ndarray:
        """Element positions of `storage` lent to a live partition."""
        out = [self.handles[p.handle].elems for p in self.parts
               if p.live and self.handles[p.handle].storage == storage]
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def unusable(self, h: int) -> set[str]:
        """S8/S13 per handle: lent to a partition, or handed to torch."""
        handle = self.handles[h]
        return {OWNERSHIP} if handle.handed or handle.lent_to is not None else set()

    def touches_lent(self, storage: int, elems: np.ndarray) -> bool:
        return bool(np.isin(elems, self.lent_elems(storage)).any())

    # -- the rules, one per step ------------------------------------------------------------
    def check_view(self, h: int) -> set[str]:
        return self.unusable(h)

    def check_partition(self, h: int) -> set[str]:
        handle = self.handles[h]
        errors = self.unusable(h)
        if self.touches_lent(handle.storage, handle.elems):
            errors.add(OWNERSHIP)
        return errors

    def check_unpartition(self, p: int) -> set[str]:
        return set() if self.parts[p].live else {OWNERSHIP}

    def check_read(self, h: int) -> set[str]:
        handle = self.handles[h]
        errors = self.unusable(h)
        if not self.storages[handle.storage].written[handle.elems].all():
            errors.add(OWNERSHIP)                     # S14
        return errors

    def check_write(self, h: int) -> set[str]:
        handle = self.handles[h]
        errors = self.unusable(h)
        if self.touches_lent(handle.storage, handle.elems):
            errors.add(OWNERSHIP)                     # lent bytes are written only through their partition
        return errors

    check_hand_to_torch = check_write                 # torch may write what it is handed

    def check_launch(self, p: int, x: int | None, reads_output: bool) -> set[str]:
        """A launch writing partition `p`, reading handle `x` (or no input)."""
        part = self.parts[p]
        if not part.live:
            return {OWNERSHIP}
        errors = set()
        out = self.handles[part.handle]
        if reads_output and not self.storages[out.storage].written[out.elems].all():
            errors.add(OWNERSHIP)                     # S14: z.load() of unwritten elements
        if x is not None:
            xs = self.handles[x]
            errors |= self.unusable(x)
            if xs.storage == out.storage and np.isin(xs.elems, out.elems).any():
                errors.add(ALIAS)                     # S7
            if not self.storages[xs.storage].written[xs.elems].all():
                errors.add(OWNERSHIP)                 # S14
        return errors

    # -- effects of accepted steps -----------------------------------------------------------
    def partition(self, h: int, tile: int) -> int:
        self.parts.append(Part(h, tile))
        self.handles[h].lent_to = len(self.parts) - 1
        return len(self.parts) - 1

    def end_lending(self, p: int) -> None:
        """unpartition(), or the partition's last reference dropped."""
        part = self.parts[p]
        part.live = False
        if self.handles[part.handle].lent_to == p:
            self.handles[part.handle].lent_to = None

    def values(self, h: int) -> np.ndarray:
        handle = self.handles[h]
        return self.storages[handle.storage].values[handle.elems]

    def write(self, storage: int, elems: np.ndarray, values) -> None:
        s = self.storages[storage]
        s.values[elems] = np.asarray(values, np.float32)
        s.written[elems] = True

    def launch(self, p: int, x: int | None) -> None:
        """Effects of the fuzzer's two kernels: z = 2 x + 1 (x padded with 0 past its end),
        or z = z + 1 when there is no input."""
        out = self.handles[self.parts[p].handle]
        s = self.storages[out.storage]
        if x is None:
            new = s.values[out.elems] + np.float32(1.0)
        else:
            xv = self.values(x)
            padded = np.zeros(out.elems.size, np.float32)
            n = min(xv.size, out.elems.size)
            padded[:n] = xv[:n]
            new = padded * np.float32(2.0) + np.float32(1.0)
        self.write(out.storage, out.elems, new)
