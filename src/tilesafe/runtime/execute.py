"""Running compiled code: the backend starts the launch, the runtime does the rest.

A backend hands back a `Launch` (backends/protocol.py) and knows nothing of what follows.
Here, in this order: S16's ticket counters are supplied (a runtime tensor, ordered like any
other); on a GPU the current stream waits for conflicting work on other streams (S10); the
backend starts the launch; what it wrote completely is marked initialised (S14), with what
an unsafe launch wrote through pointers; inside `ts.graph()` the accesses are registered
with the capture (S12), else as pending on the stream (S9/S10); the caller gets a Future.
"""
from __future__ import annotations

from ..settings import graph_var
from . import arrivals, ordering
from .future import Future
from .safety import mark_written


def execute(compiled, bound) -> Future:
    """Launch `compiled` code with these bound arguments; returns the launch's Future."""
    call = compiled.launch(bound)
    counters = arrivals.counters(call.device, call.tickets) if call.tickets else None
    # A list, not a generator: tuple(generator) raises Python's GC count (layout_unrolled.same_objects says why)
    outputs = tuple([bound.tensors[n].obj for n in compiled.kernel.outputs])
    if call.synchronous:    # finished when start returns: nothing to order or keep pending
        _wait_for_pending(compiled.kernel, bound)
        call.start(None if counters is None else counters._torch())
        mark_written(bound, compiled.written)
        if call.pointer_writes:
            _mark_pointer_writes(bound, call.pointer_writes)
        return Future(outputs)
    return _on_gpu(compiled, bound, call, counters, outputs)


def _wait_for_pending(kernel, bound) -> None:
    """S9 on the CPU: a launch there runs now, so it first waits for conflicting work still
    pending (a collective on gloo's thread: `ts.distributed` with async_op=True)."""
    for name, f in bound.tensors.items():
        t = f.tensor
        if t is not None and t._state._pending:
            t._state.wait_for_host(t._byte_set(), ordering.writes(kernel, name), f"`{kernel.name}`")


def _on_gpu(compiled, bound, call, counters, outputs) -> Future:
    """Order after conflicting work on other streams (S10), launch on the current stream,
    register the launch; inside `ts.graph()` register the accesses with the graph."""
    import torch
    kernel = compiled.kernel
    with torch.cuda.device(call.device):
        stream = torch.cuda.current_stream()
        capture = graph_var.get()
        extra = () if counters is None else (counters,)   # written by every launch that takes them
        sets = None
        if capture is None:
            sets = ordering.byte_sets(kernel, bound, extra)    # once, for the ordering and the record
            ordering.order_before(kernel, bound, stream, extra, sets)
        call.start(None if counters is None else counters._torch())
        mark_written(bound, compiled.written)
        if capture is not None:
            for name, f in bound.tensors.items():
                capture.record(f.tensor, ordering.writes(kernel, name))
            for t in extra:
                capture.record(t, True)
            return Future(outputs)
        return ordering.record_after(kernel, bound, stream, outputs, extra, sets)


def _mark_pointer_writes(bound, flags_by_name) -> None:
    """What an unsafe launch wrote through pointers counts as initialised (S14)."""
    import torch
    for name, flags in flags_by_name.items():
        t = bound.tensors[name].tensor
        view = t._torch()
        t._state.mark_elements_written(view, torch.from_numpy(flags).reshape(view.shape))
