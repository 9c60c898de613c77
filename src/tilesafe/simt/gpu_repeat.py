"""A GPU launch of a layout launched before: what every launch must still check, and nothing else.

A plan (launch_plans.py) is keyed by the arguments' layout, not their addresses, so the binding,
the grid, the compiled kernel and its parameters but for the data pointers are fixed for it.
What is left per launch is done here on the arguments as passed, without wrapping torch tensors
in tilesafe tensors, in the full path's order and with its refusals:
- S8/S13: a tilesafe tensor must not be lent or handed over; a torch tensor is borrowed as
  `ts.from_torch` borrows it: it lies inside its storage, its memory gets a storage state (new
  memory in one step), and its bytes count as written when torch made or wrote them;
- S7: an output shares no byte with another argument: arguments in different memory (distinct
  storage states) cannot, and only where an output shares its memory are byte sets compared;
- S14: what the kernel reads was written; the outputs its permits cover become written;
- S9/S10: the current stream waits for conflicting work on other streams (only where some access
  is pending on another stream), and the launch is recorded as pending on its tensors' states.
Then the data pointers go into the plan's parameter array (an unsafe kernel's write masks follow
their target's memory, LaunchPlan.own_masks) and the driver launches it. test_simt_plan_refusals.py
checks that this path and the full one refuse alike; test_simt_gpu_repeat.py what it records.
"""
from __future__ import annotations

import torch

from ..runtime.byte_set_slots import ByteSetSlots
from ..runtime.constructors import from_torch
from ..runtime.freeze import refuse_frozen_write
from ..runtime.future import Completion, Future
from ..runtime.memory_map import MEMORY
from ..runtime.storage_state import STATE_ATTR, StorageState, record_launch
from ..runtime.tensor import Tensor
from . import gpu_launch, write_masks
from .binding import covered_targets
from .memory_checks import check_aliasing, refuse_unwritten
from .simt_future import SimtFuture


class GpuRepeat:
    __slots__ = ("kernel", "index", "slots", "outputs", "compiled", "config", "args", "err", "masks", "pairs",
                 "names", "data", "sets", "streams", "plan", "mask_slots", "writes")

    def __init__(self, kernel, plan, bound, index: int):
        self.kernel, self.index = kernel, index
        covered = covered_targets(kernel, bound)
        writes = {name for name in bound.tensors if kernel.runtime_view.param(name).kind in ("mut", "ptr")}
        layouts, slots = [], []
        for name, f in bound.tensors.items():     # in parameter order, as the full path visits them
            t = f.tensor._torch()
            item = t.element_size()
            extent = 0 if t.numel() == 0 else item + item * sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
            # (name, where in `seen`, read, write, covered, bytes from the first element to past the last)
            slots.append((name, plan.seen_at[name], name in kernel.read_names, name in writes, name in covered,
                          extent))
            layouts.append((tuple(t.shape), tuple(s * item for s in t.stride()), item))
        self.slots = tuple(slots)
        self.names = tuple(s[0] for s in slots)
        self.writes = tuple(s[3] for s in slots)
        self.sets = ByteSetSlots(layouts)
        self.pairs = plan.pairs
        self.outputs = tuple(plan.seen_at[at] if how == "kw" else at for how, at in plan.outputs)
        self.compiled, self.config, self.args = plan.compiled, plan.config, plan.args
        values = plan.args.values
        self.data = tuple(values[plan.data_at[name]] for name in self.names)   # the pointers' C values
        self.err = plan.err if kernel.has_checks else None
        self.masks = plan.masks       # an unsafe kernel's write masks, by target (the plan's dict)
        self.plan = plan
        self.mask_slots = tuple((name, self.names.index(name)) for name in plan.masks)
        self.streams: dict = {}       # raw stream handle -> torch's stream object (for a lazy event)

    def __call__(self, seen):
        kernel = self.kernel
        views, places, ptrs, states = [], [], [], []
        masked = False              # some state tracks initialisation (S14 has work to do)
        for name, at, _, write, _, extent in self.slots:       # S8, S13
            a = seen[at]
            ours = type(a) is Tensor
            t = a._t if ours else a
            storage = t.untyped_storage()
            sptr, nbytes, ptr = storage.data_ptr(), storage.nbytes(), t.data_ptr()
            if ours:
                a._check_usable(name)
                state = a._state
            else:
                if ptr - sptr + extent > nbytes and extent:
                    from_torch(a)        # reaches outside its storage: refused as a fresh borrow is
                state = getattr(storage, STATE_ATTR, None)
                if state is None:
                    state = _borrowed(storage, nbytes)     # may join tracked memory (a second storage)
                if state.init_mask is not None and state.torch_wrote(t):     # as from_torch marks
                    state.mark_written(t)
            if write and state.frozen:                          # ts.freeze'd since the plan was made
                refuse_frozen_write(kernel.name, name, state, t)
            if state.init_mask is not None:
                masked = True
            views.append(t)
            places.append((t, None, None, sptr, nbytes))
            ptrs.append(ptr)
            states.append(state)
        sets = self.sets.placed(places, ptrs)
        for i, j in self.pairs:                                 # S7 by bytes only where memory is shared
            if states[i].__dict__ is states[j].__dict__:        # (share_memory, inlined)
                check_aliasing(kernel, dict(zip(self.names, sets)))
                break
        if masked:                                              # S14
            for slot, state, t in zip(self.slots, states, views):
                if slot[2] and state.init_mask is not None and not state.is_written(t):
                    refuse_unwritten(kernel, slot[0])
        for value, ptr in zip(self.data, ptrs):
            value.value = ptr
        if self.mask_slots:
            self.plan.own_masks({name: ptrs[k] for name, k in self.mask_slots})
        index = self.index
        if gpu_launch.current_device() == index:
            done, marks = self._start(views, states, sets, masked)
        else:
            with torch.cuda.device(index):
                done, marks = self._start(views, states, sets, masked)
        return SimtFuture(Future(tuple([seen[at] for at in self.outputs]), done), kernel, self.err, marks)

    def _start(self, views, states, sets, masked):
        index = self.index
        stream = gpu_launch.current_stream(index)
        k = 0
        for state in states:                                    # S10
            if state._pending and state.pending_stream != stream:
                state.order_device(sets[k], self.writes[k], stream)
            k += 1
        marks = []
        if self.config is not None:
            if self.masks:
                marks = write_masks.clear(self.masks, {name: (t, s) for name, t, s in zip(self.names, views, states)
                                                       if name in self.masks})
            gpu_launch.launch(self.compiled, self.config, stream, self.args)
            if masked:                                          # S14
                for slot, state, t in zip(self.slots, states, views):
                    if slot[4] and state.init_mask is not None:
                        state.mark_written(t)
        stream_obj = self.streams.get(stream)
        if stream_obj is None:      # the current stream's torch object, looked up once per stream
            stream_obj = self.streams[stream] = torch.cuda.current_stream(index)
        done = Completion(None, stream, tuple(views), stream_obj)   # event made lazily
        record_launch(states, sets, self.writes, done, stream)   # S9/S10
        return done, marks


def _borrowed(storage, nbytes: int) -> StorageState:
    """S13: the state of torch memory tilesafe has not seen, as `ts.from_torch` makes it (all bytes
    written): placed in the memory map in one step where it meets no tracked range, else joined
    with what it meets."""
    if nbytes:
        state = StorageState(nbytes)
        state.device, state.base = storage.device, storage.data_ptr()
        if MEMORY.insert_fresh(state, storage):
            setattr(storage, STATE_ATTR, state)
            return state
    return StorageState.of_storage(storage)
