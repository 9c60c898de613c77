"""The reference sanitizer: records each block's reads and writes and reports violations.

It finds races between blocks (two blocks writing one element, or one writing what another
reads, outside atomics), out-of-bounds pointer accesses, reads of memory nobody wrote, and
maskless accesses that the bounds plan wrongly proved in range. It is always on for unsafe
kernels and optional (`sanitize=True`, `TILESAFE_SANITIZE=1`) for safe ones.
"""
from __future__ import annotations

import numpy as np

from ...errors import SanitizerError

NOBODY = -1


class Sanitizer:
    def __init__(self, kernel_name: str, grid, masks: dict, initialised: dict):
        self.kernel_name = kernel_name
        self.grid = tuple(grid)
        self.masks = masks                  # id(op) -> per-axis mask flags from the bounds plan
        self.initialised = initialised      # param name -> flat bool array (None: all written)
        self.writer: dict[str, np.ndarray] = {}
        self.reader: dict[str, np.ndarray] = {}
        self.shared_read: dict[str, np.ndarray] = {}
        self.atomic: dict[str, np.ndarray] = {}

    def _arrays(self, name: str, size: int):
        if name not in self.writer:
            self.writer[name] = np.full(size, NOBODY, np.int64)
            self.reader[name] = np.full(size, NOBODY, np.int64)
            self.shared_read[name] = np.zeros(size, bool)
            self.atomic[name] = np.full(size, NOBODY, np.int64)   # the last block to update atomically
        return self.writer[name], self.reader[name], self.shared_read[name], self.atomic[name]

    def _block(self, interp) -> int:
        return int(np.ravel_multi_index(interp.block_id, self.grid)) if self.grid else 0

    def _where(self, block: int) -> str:
        return str(tuple(int(i) for i in np.unravel_index(block, self.grid))) if self.grid else "()"

    # --- tile accesses of safe kernels ------------------------------------------------------
    def tile_access(self, interp, op, origin, shape, extent, write: bool) -> None:
        mask = self.masks.get(id(op))
        if mask is not None:
            for axis, (o, s, e, m) in enumerate(zip(origin, shape, extent, mask)):
                if not m and (o < 0 or o + s > e):
                    raise SanitizerError(f"block {interp.block_id} of `{self.kernel_name}` accesses elements "
                                         f"[{o}, {o + s}) of axis {axis} (extent {e}) without a mask",
                                         op.loc, help="this is a bug in tilesafe's bounds proof; please report it")
        if not write:
            return
        name = op.args[0].name
        arr = interp.tensors[name]
        idx = _element_indices(arr.shape, origin, shape)
        if idx.size:
            self._record(interp, op, name, arr.size, idx, "write")

    # --- pointer accesses of unsafe kernels -----------------------------------------------------
    def pointer_access(self, interp, op, arr, offsets, mask, kind) -> None:
        name = op.args[0].name
        offs = offsets[mask]
        bad = offs[(offs < 0) | (offs >= arr.size)]
        if bad.size:
            raise SanitizerError(f"block {interp.block_id} of `{self.kernel_name}` accesses `{name}` at offset "
                                 f"{int(bad[0])}, outside its {arr.size} elements",
                                 op.loc, help="mask the access (mask=offsets < n)")
        offs = np.unique(offs)
        if kind is False:
            self._check_initialised(interp, op, name, arr.size, offs)
            self._record(interp, op, name, arr.size, offs, "read")
        else:
            self._record(interp, op, name, arr.size, offs, "atomic" if kind == "atomic" else "write")

    def _check_initialised(self, interp, op, name, size, offs) -> None:
        init = self.initialised.get(name)
        if init is None:
            return
        writer = self._arrays(name, size)[0]
        unwritten = offs[~init[offs] & (writer[offs] == NOBODY)]
        if unwritten.size:
            raise SanitizerError(f"block {interp.block_id} of `{self.kernel_name}` reads `{name}` at offset "
                                 f"{int(unwritten[0])}, which nobody has written",
                                 op.loc, help="initialise the memory (ts.zeros) or write it before reading")

    def _record(self, interp, op, name, size, offs, kind) -> None:
        writer, reader, shared, atomic = self._arrays(name, size)
        me = self._block(interp)
        if kind == "atomic":
            clash = offs[(writer[offs] != NOBODY) & (writer[offs] != me) & (atomic[offs] == NOBODY)]
            atomic[offs] = me
            if clash.size:
                self._race(interp, op, name, int(clash[0]), int(writer[clash[0]]), "writes", "atomically updates")
            return
        if kind == "read":
            clash = offs[(writer[offs] != NOBODY) & (writer[offs] != me)]
            if clash.size:
                self._race(interp, op, name, int(clash[0]), int(writer[clash[0]]), "writes", "reads")
            other = (reader[offs] != NOBODY) & (reader[offs] != me)
            shared[offs[other]] = True
            reader[offs[reader[offs] == NOBODY]] = me
            return
        clash_w = offs[(writer[offs] != NOBODY) & (writer[offs] != me)]
        if clash_w.size:
            self._race(interp, op, name, int(clash_w[0]), int(writer[clash_w[0]]), "also writes")
        other_reader = (reader[offs] != NOBODY) & (reader[offs] != me)
        other_atomic = (atomic[offs] != NOBODY) & (atomic[offs] != me)
        clash_r = offs[other_reader | shared[offs] | other_atomic]
        if clash_r.size:
            o = int(clash_r[0])
            if atomic[o] not in (NOBODY, me) and reader[o] in (NOBODY, me):
                self._race(interp, op, name, o, int(atomic[o]), "atomically updates")
            self._race(interp, op, name, o, int(reader[o]), "reads")
        writer[offs] = me

    def _race(self, interp, op, name, offset, other, what, mine="writes") -> None:
        raise SanitizerError(f"race on `{name}` at element {offset}: block {interp.block_id} {mine} it and block "
                             f"{self._where(other)} {what} it in the same launch of `{self.kernel_name}`",
                             op.loc, help="give each block its own elements (a ts.Mut output), or use atomics")


def _element_indices(shape, origin, tile) -> np.ndarray:
    ranges = []
    for o, s, e in zip(origin, tile, shape):
        lo, hi = max(o, 0), min(o + s, e)
        if hi <= lo:
            return np.zeros(0, np.int64)
        ranges.append(np.arange(lo, hi))
    grids = np.meshgrid(*ranges, indexing="ij")
    return np.ravel_multi_index([g.reshape(-1) for g in grids], shape).astype(np.int64)
