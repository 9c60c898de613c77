"""Prepared GPU launches: repeating a launch with the same arguments (PreparedLaunch), and
launching new memory in a layout launched before (LayoutLauncher, for library call plans).

Same argument objects mean the same pointers, extents, strides and grid, so everything
Triton's dispatcher would recompute (argument binding, specialization key, cache lookup)
is done once, by the backend (`Launch.direct`), and each call goes straight to the compiled
kernel's launcher. What safety needs per call stays: ordering after conflicting work on
other streams (S10), initialisation marking (S14), and registering the launch as pending (S9),
in the tail every GPU fast launch shares (pending_start.start_pending).
"""
from __future__ import annotations

import functools
import weakref

import torch

from ..settings import graph_var
from . import arrivals
from .execute import execute
from .byte_set_slots import ByteSetSlots
from .future import Future
from .ordering import accesses, writes
from .partition import Partition
from .pending_start import start_pending
from .planned_unrolled import layout_direct
from .safety import mark_written


def prepare(compiled, bound) -> "PreparedLaunch | None":
    """A launcher for repeating this launch (the launch fast path), or None where the
    backend has none (the CPU backends: their launch is the run itself)."""
    call = compiled.launch(bound)
    if call.synchronous:
        return None
    counters = arrivals.counters(call.device, call.tickets) if call.tickets else None
    direct = call.direct(None if counters is None else counters._torch())
    if direct is None:
        return None
    start, args = direct
    return PreparedLaunch(compiled, bound, start, args, call.device, counters)


class PreparedLaunch:
    def __init__(self, compiled, bound, start, args, device, counters=None):
        self.compiled, self.bound = compiled, bound
        self.start, self.args = start, args
        acc = accesses(compiled.kernel, bound, () if counters is None else (counters,))
        self.accesses = tuple((t._state, t._byte_set(), write) for t, write in acc)
        self.columns = tuple(zip(*self.accesses)) or ((), (), ())   # states, byte sets, writes
        # Held weakly: a cached plan must not keep memory alive; the caller holds the
        # arguments during a call, and the Completion holds them while the GPU runs.
        self.tensors = tuple(weakref.ref(t) for t, _ in acc)
        self.written = tuple(weakref.ref(bound.tensors[n].tensor) for n in compiled.written)
        self.outputs = tuple(weakref.ref(bound.tensors[n].obj) for n in compiled.kernel.outputs)
        self.device = device
        self._streams: dict = {}
        self.device_index = device.index if device.index is not None else torch.cuda.current_device()

    def __call__(self) -> Future:
        if graph_var.get() is not None:
            return execute(self.compiled, self.bound)      # capture registers with the graph
        mark = None
        if any(ref()._state.init_mask is not None for ref in self.written):
            # prefix partitions mark their prefix only
            mark = functools.partial(mark_written, self.bound, self.compiled.written)
        done = start_pending(self.start, torch._C._cuda_getCurrentRawStream(self.device_index), self.args,
                             *self.columns, tuple([ref() for ref in self.tensors]), self._streams,
                             self.device_index, mark)
        return Future(tuple([o() for o in self.outputs]), done)


def prepare_layout(compiled, bound) -> "LayoutLauncher | None":
    """A launcher for launches of `bound`'s layout with other memory (a library call plan's
    later calls), or None where the backend has none (the CPU backends, S16's counters)."""
    call = compiled.launch(bound)
    if call.synchronous:
        return None
    found = call.relauncher()
    if found is None:
        return None
    return LayoutLauncher(compiled, bound, *found, call.device)


class LayoutLauncher:
    """What Triton's dispatcher would redo for each launch of one layout (binding, the
    specialization key, the cache lookup) is done once; each launch computes its arguments
    (pointers) and does what safety needs: ordering after conflicting work on other streams
    (S10), initialisation marks (S14), registering the launch as pending (S9). The caller
    (launch_cache.Entry) has made the launch cache's per-call checks. Holds no tensor."""

    def __init__(self, compiled, bound, start, values, device):
        self.compiled, self.start, self.values = compiled, start, values
        kernel = compiled.kernel
        self.writes = tuple((name, writes(kernel, name)) for name in bound.tensors)
        self.write_flags = tuple(w for _, w in self.writes)
        names = [name for name, _ in self.writes]
        self.names = tuple(names)    # the order of `_direct`'s positional arguments
        self.outputs = tuple(names.index(n) for n in kernel.outputs)    # argument positions
        self.output_names = tuple(kernel.outputs)
        self.device = device
        self.device_index = device.index if device.index is not None else torch.cuda.current_device()
        self._streams: dict = {}
        facts = [bound.tensors[name] for name, _ in self.writes]
        self.launched = None     # what its launches run (launch_cache.Launched), set by its layout plan
        self._sets = ByteSetSlots((tuple(f.shape), tuple(s * f.dtype.itemsize for s in f.strides), f.dtype.itemsize)
                                  for f in facts)
        # `direct`'s steps written out for this layout (planned_unrolled.layout_direct): the
        # same steps without the loop over the arguments.
        self._direct = layout_direct(self)

    def __call__(self, bound) -> Future:
        if graph_var.get() is not None:
            return execute(self.compiled, bound)           # capture registers with the graph
        facts = bound.tensors
        # Each argument's object (ArgFacts.obj and .tensor without their property calls).
        objs = [facts[name].ref() for name, _ in self.writes]
        held = [o._tensor if type(o) is Partition else o for o in objs]
        return self._start(held, objs, bound)

    def direct(self, tensors: dict, objs: dict, ptrs: dict) -> Future:
        """A launch from the argument objects themselves (`tensors`: parameter -> tilesafe
        tensor, none of whose memory tracks initialisation; `objs`: parameter -> what was
        passed; `ptrs`: parameter -> the address of its first element), checked by the caller
        as for `__call__` (launch_cache.LayoutPlan.direct): `_start` without its masks (S14)
        and bound, in one pass over the arguments."""
        names = self.names
        return self._direct(self, *[tensors[n] for n in names], *[objs[n] for n in names], *[ptrs[n] for n in names])

    def _start(self, held: list, objs: list, bound) -> Future:
        views = {name: t._t for (name, _), t in zip(self.writes, held)}
        args = self.values(bound, views)
        places = [(v, None, None, (s := v.untyped_storage()).data_ptr(), s.nbytes()) for v in views.values()]
        # first addresses as aliasing.first_address gives them, inline (per launch): from the
        # storage offset alone, which is right for empty and non-empty views alike
        sets = self._sets.placed(places, [p[3] + p[0].storage_offset() * p[0].element_size() for p in places])
        states = [t._state for t in held]
        mark = None
        for state in states:
            if state.init_mask is not None:
                mark = functools.partial(mark_written, bound, self.compiled.written)
                break
        done = start_pending(self.start, torch._C._cuda_getCurrentRawStream(self.device_index), args, states, sets,
                             self.write_flags, tuple(views.values()), self._streams, self.device_index, mark)
        return Future(tuple([objs[k] for k in self.outputs]), done)
