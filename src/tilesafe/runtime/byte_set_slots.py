"""The byte sets of a launcher's tensor arguments, kept from one launch to the next.

A launcher of one layout (planned_launch.PlannedLaunch for library calls, prepared_launch.
LayoutLauncher for kernels launched with new objects, simt's repeated launches) registers a
byte set per argument with every launch (S9/S10). The layout fixes each argument's shape,
byte strides and item size; only its memory's place can change: the storage's address and
size and the view's byte offset in it. So a slot keeps the set of its last launch and makes
a new one only when the place moved (new memory: a fresh output, another caller's tensor).
One cache for every launcher: `placed` per launch, or a launcher's own test of a slot's
last set with `make` on a miss (PlannedLaunch, in its one pass over the arguments).
"""
from __future__ import annotations

from .aliasing import ByteSet, device_name

_new_set = tuple.__new__      # ByteSet(...) without the named tuple's Python-level constructor


class ByteSetSlots:
    """Per tensor argument (slot) of one layout: its byte set at the last launch."""
    __slots__ = ("layouts", "sets", "names")

    def __init__(self, layouts):
        self.layouts = tuple(layouts)             # per slot: (shape, byte strides, item size)
        self.sets: list = [None] * len(self.layouts)
        # Per slot, its device's name, read at its first set: a launcher starts its kernel on
        # one device, so every argument of every launch of it is on that device.
        self.names: list = [None] * len(self.layouts)

    def placed(self, args, ptrs) -> list:
        """The byte sets of this launch, per slot. `args`: per slot, a sequence whose items
        0, 3 and 4 are the torch view, its storage's address and the storage's bytes;
        `ptrs`: per slot, the address of the view's first element (0 for an empty view, as
        torch's `data_ptr()` gives it: its offset is then the view's storage offset). The
        list returned is the cache itself: read it before the launcher's next launch
        (launches hold the runtime's lock)."""
        sets = self.sets
        k = 0
        for a in args:
            sptr, nbytes, ptr = a[3], a[4], ptrs[k]
            # aliasing.first_address(view, sptr) - sptr, inline: per argument per launch, where
            # a call costs more than the arithmetic (and `ptr` is already known)
            offset = ptr - sptr if ptr else a[0].storage_offset() * a[0].element_size()
            byteset = sets[k]
            if byteset is None or byteset[1] != sptr or byteset[3] != offset or byteset[2] != nbytes:
                self.make(k, a[0], sptr, nbytes, offset)
            k += 1
        return sets

    def make(self, k: int, view, sptr: int, nbytes: int, offset: int):
        """Slot `k`'s byte set for memory at a new place (`view`: a torch view on the slot's
        device; the storage's address and bytes; the argument's byte offset in it), kept."""
        shape, strides, item = self.layouts[k]
        name = self.names[k]
        if name is None:
            name = self.names[k] = device_name(view.device)
        byteset = self.sets[k] = _new_set(ByteSet, (name, sptr, nbytes, offset, shape, strides, item))
        return byteset
