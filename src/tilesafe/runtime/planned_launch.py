"""One launch of a library call's plan, started straight from the call's torch memory.

A library call plan (kernels/call_plans.py) knows each launch of a call by layout: which of
the call's root tensors each kernel argument views, at which element offset, and the
launch cache's entry for that layout (runtime/launch_cache.Entry: the verdicts of binding,
specialization, bounds masks and S7 between the arguments). The caller has checked what
makes those verdicts hold for its roots: the same layout, and roots in different storages
in different memory (distinct storage states), so every pair of views meets as in the
accepted launch or not at all. So a launch here builds no tilesafe tensor, partition or
bound on a GPU: it checks what the layout cannot fix, per storage state —
  * S8: no live partition holds any byte of the memory (else the full step decides);
  * S14: the bytes it reads were written (states with an `init_mask` only; none: all were);
  * alignment: each address has the 16-byte class the compiled kernel was specialised for;
then starts Triton's compiled kernel with a prebuilt argument tuple (the layout's extents,
strides, scalars and grid; the call's addresses, and TMA descriptors made from the layout's
template at those addresses), ordered after conflicting work of other streams (S10), marks
what it wrote (S14, masked states only) and registers its accesses as pending (S9): the tail
every GPU fast launch shares (pending_start). Byte sets are made only when an address moved
since the last launch of the slot (byte_set_slots). On the CPU backends the launch is the run
itself: a bound is built from views and `execute` runs it. At the first doubt `run` returns
False before anything happened, and the caller takes the step's full path.
"""
from __future__ import annotations

import weakref

import torch

from ..backends.triton.tma import layout_descriptor
from .binding import ArgFacts, Bound
from .byte_set_slots import ByteSetSlots
from .execute import execute
from .launch_cache import Launched
from .ordering import writes
from .planned_unrolled import unrolled as written_out
from .tensor import Tensor

_UNKNOWN, _CPU, _GPU, _NONE = range(4)


class PlannedLaunch:
    """A launch of one layout from roots: `access` per tensor parameter (in the kernel's
    order): (parameter, root index, element offset from the root's first element or None
    for the root itself)."""
    __slots__ = ("kernel", "entry", "plan", "compiled", "access", "slots", "scalars", "mode", "start", "values",
                 "pointers", "descriptors", "aligns", "sets", "device_index", "streams", "reads", "written", "facts",
                 "items", "byte_strides", "writes", "offsets", "shapes", "launched", "places", "unrolled")

    def __init__(self, kernel, entry, access, scalars: dict):
        plan = entry.plan
        self.kernel, self.entry, self.plan, self.compiled = kernel, entry, plan, plan.compiled
        self.access = tuple(access)
        self.slots = tuple(r for _, r, _ in self.access)   # each argument's root
        self.scalars = {**plan.scalars, **scalars}
        self.facts = tuple(plan.facts[name] for name, _, _ in self.access)
        self.items = tuple(f[2].itemsize for f in self.facts)
        self.offsets = tuple(0 if off is None else off * item for (_, _, off), item in zip(self.access, self.items))
        self.shapes = tuple(tuple(f[0]) for f in self.facts)
        self.byte_strides = tuple(tuple(s * item for s in f[1]) for f, item in zip(self.facts, self.items))
        names = [name for name, _, _ in self.access]
        self.writes = tuple(writes(kernel, name) for name in names)
        self.reads = tuple(names.index(n) for n in plan.reads)
        self.written = tuple(names.index(n) for n in self.compiled.written)
        # The 16-byte class of each argument's address that the entry's layout was compiled for.
        by_name = dict(zip(entry.form.names, entry.aligns))
        self.aligns = tuple(by_name.get(name) for name in names)
        self.mode = _UNKNOWN if None not in self.aligns else _NONE
        self.sets = ByteSetSlots(zip(self.shapes, self.byte_strides, self.items))
        # Per slot, its root's place ((first address, storage address, bytes): a root's items
        # 2-4) at the last launch whose alignment and byte set were checked and made for it.
        self.places: list = [None] * len(self.access)
        self.streams: dict = {}
        self.unrolled = None        # the GPU form written out for this layout (planned_unrolled), once known

    # -- per launch -------------------------------------------------------------------------
    def run(self, roots: list) -> bool:
        """Launch with these roots ((torch view, storage state, first element's address,
        storage's address, storage's bytes) per root); False: nothing was done, the caller
        takes the full step."""
        # The GPU form is written out per layout (planned_unrolled.py) once the first launch
        # knows it: one pass over the arguments for the checks (S8, alignment; a slot's
        # address, alignment class and byte set checked and made again only when its root's
        # place moved: byte_set_slots), then S14's reads of masked states, and only then
        # anything that acts (pending_start).
        unrolled = self.unrolled
        if unrolled is not None:
            return unrolled(self, roots)
        return self._run_here(roots)

    def _marks(self, states: list, roots: list) -> None:
        for k in self.written:
            if states[k].init_mask is not None:
                self._mark(k, roots)

    def _run_here(self, roots: list) -> bool:
        """`run` before the GPU form is known (the first launch decides it), and on the CPU
        backends, where the launch is `execute` on a bound built from views."""
        mode = self.mode
        if mode == _NONE:
            return False
        args = [roots[r] for r in self.slots]                  # per argument: its root
        ptrs = [a[2] + off for a, off in zip(args, self.offsets)]
        aligns = self.aligns
        k = 0
        for a in args:
            state = a[1]
            if state._lent and _lent(state) or state.frozen and self.writes[k]:
                return False
            if ptrs[k] & 15 != aligns[k]:
                return False
            k += 1
        for k in self.reads:                  # S14 (a masked state only: none means all written)
            state = args[k][1]
            if state.init_mask is not None and not state.is_written(self._view(k, roots)):
                return False
        bound = self._bound(roots)
        if mode == _UNKNOWN:
            mode = self.mode = self._prepare(bound)
            if mode == _NONE:
                return False
            if mode == _GPU:
                # What every GPU launch of this layout ran (the same facts each time), made once.
                launched = self.launched = Launched.__new__(Launched)
                launched.consts, launched.scalars, launched.grid, launched.compiled = \
                    self.plan.consts, self.scalars, self.plan.grid, self.compiled
                self.unrolled = written_out(self, _lent)
                return self.unrolled(self, roots)
        execute(self.compiled, bound)
        self.kernel.last_launch = Launched(bound, self.compiled)
        return True

    # -- views, when something needs one ---------------------------------------------------
    def _view(self, k: int, roots):
        _, r, off = self.access[k]
        tv = roots[r][0]
        if off is None:
            return tv
        shape, strides = self.facts[k][0], self.facts[k][1]
        return tv.as_strided(shape, strides, tv.storage_offset() + off)

    def _mark(self, k: int, roots) -> None:
        """What the launch wrote is initialised (safety.mark_written, for one argument)."""
        grid = self.plan.grid
        if grid is not None and 0 in grid:
            return
        view = self._view(k, roots)
        f = self.facts[k]
        if f[4] and grid:
            view = view[tuple(slice(0, g * t) for g, t in zip(grid, f[3]))]
        roots[self.access[k][1]][1].mark_written(view)

    def _bound(self, roots) -> Bound:
        tensors, held = {}, []
        for k, (name, r, off) in enumerate(self.access):
            tv, state = roots[r][0], roots[r][1]
            shape, strides, dtype, tile, prefix, _ = self.facts[k]
            t = Tensor(self._view(k, roots) if off is not None else tv, state, dtype)
            held.append(t)
            tensors[name] = ArgFacts(weakref.ref(t), shape, strides, dtype, tile, prefix)
        return Bound(tensors, dict(self.plan.consts), dict(self.scalars), self.plan.grid, held)

    def _prepare(self, bound) -> int:
        """Which way this layout launches: the CPU backends run `execute`; a GPU launch gets
        Triton's compiled kernel and its argument tuple (none: the full step, e.g. S16's counters)."""
        call = self.compiled.launch(bound)
        if call.synchronous:
            return _CPU
        found = getattr(call, "layout_slots", lambda: None)()
        if found is None:
            return _NONE
        self.start, values, pointers, descriptors = found
        names = [name for name, _, _ in self.access]
        self.values = values
        self.pointers = tuple((i, names.index(p)) for i, p in pointers)
        self.descriptors = tuple((i, names.index(p), *layout_descriptor(*self.facts[names.index(p)][:2], box, cols))
                                 for i, p, box, cols in descriptors)
        device = call.device
        self.device_index = device.index if device.index is not None else torch.cuda.current_device()
        return _GPU


def _lent(state) -> bool:
    """Some live partition holds bytes of this memory (S8)."""
    return any((p := ref()) is not None and p._live for _, ref in state._lent)
