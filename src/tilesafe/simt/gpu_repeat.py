"""The repeated GPU launch of a plan: what every launch must still check, and nothing else.

A plan (launch_plans.py) is keyed by the arguments' layout, storage extents included, so the
binding, the grid, the aliasing verdict (S7), the compiled kernel, its arguments in numba's ABI
and each tensor's byte set are fixed for it. What is left per launch, done here on the torch
views and storage objects the layout key already fetched, without wrapping torch tensors in
tilesafe tensors:
- S8/S13: a tilesafe tensor must not be lent or handed over; a torch tensor's bytes count as
  written when torch made or wrote them (as `ts.from_torch` decides);
- S14: what the kernel reads was written; the outputs its permits cover become written;
- S9/S10: the current stream waits for conflicting work on other streams, and the launch is
  recorded as pending on its tensors' storage states.
The order and the bookkeeping are those of launch._start; test_simt_gpu_repeat.py checks the
two paths leave the same state.
"""
from __future__ import annotations

import torch

from ..errors import OwnershipError
from ..runtime.future import Completion, Future
from ..runtime.storage_state import _ATTR, StorageState
from ..runtime.tensor import Tensor
from . import gpu_launch, write_masks
from .binding import covered_targets
from .simt_future import SimtFuture


class GpuRepeat:
    __slots__ = ("kernel", "index", "slots", "outputs", "compiled", "config", "args", "err", "masks")

    def __init__(self, kernel, plan, bound, index: int):
        self.kernel, self.index = kernel, index
        covered = covered_targets(kernel, bound)
        writes = {name for name in bound.tensors if kernel.runtime_view.param(name).kind in ("mut", "ptr")}
        # per tensor, in the order launch._start visits them: (name, where in `seen`, read, write, byte set, covered)
        self.slots = tuple((name, plan.seen_at[name], name in kernel.read_names, name in writes,
                            f.tensor._byte_set(), name in covered) for name, f in bound.tensors.items())
        self.outputs = tuple(plan.seen_at[at] if how == "kw" else at for how, at in plan.outputs)
        self.compiled, self.config, self.args = plan.compiled, plan.config, plan.args
        self.err = plan.err if kernel.has_checks else None
        self.masks = plan.masks       # an unsafe kernel's write masks, by target

    def __call__(self, seen):
        kernel = self.kernel
        views = []
        for name, at, read, write, byteset, covered in self.slots:
            a, t, storage = seen[at]
            if isinstance(a, Tensor):
                a._check_usable(name)
                state = a._state
            else:                    # a torch tensor, borrowed as ts.from_torch would (S13)
                state = getattr(storage, _ATTR, None) or StorageState.of(t)
                if state.init_mask is not None and state.torch_wrote(t):
                    state.mark_written(t)
            if read and state.init_mask is not None and not state.is_written(t):
                raise OwnershipError(f"argument `{name}` of `{kernel.name}` is read, but it came from ts.empty "
                                     "and has not been written", help="write it first, or create it with ts.zeros")
            views.append((t, state, byteset, write, covered))
        index = self.index
        if index == torch.cuda.current_device():
            done, marks = self._start(views, torch.cuda.current_stream(index))
        else:
            with torch.cuda.device(index):
                done, marks = self._start(views, torch.cuda.current_stream(index))
        outputs = tuple(seen[at][0] for at in self.outputs)
        return SimtFuture(Future(outputs, done), kernel, self.err, marks)

    def _start(self, views, stream):
        handle = stream.cuda_stream
        for t, state, byteset, write, _ in views:       # S10
            state.order_device(byteset, write, handle)
        marks = []
        if self.config is not None:
            if self.masks:
                marks = write_masks.clear(self.masks, {slot[0]: (v[0], v[1]) for slot, v in zip(self.slots, views)
                                                       if slot[0] in self.masks})
            gpu_launch.launch(self.compiled, self.config, handle, self.args)
        for t, state, _, _, covered in views:           # S14
            if covered and state.init_mask is not None:
                state.mark_written(t)
        done = Completion(None, handle, tuple(v[0] for v in views), stream)
        for t, state, byteset, write, _ in views:       # S9/S10
            state.record(byteset, write, done)
        return done, marks
