"""S9/S10 on a GPU: order each launch after the conflicting work before it, and record it.

Tracking is by storage byte ranges (`StorageState`), not by handles, so views and aliases
are covered. Work on the same stream is already ordered by the stream; only a conflict on
another stream costs a `wait_event`. A launch's event is recorded only when something
waits for it, and its completion keeps the launch's tensors alive until the GPU is done.
"""
from __future__ import annotations

from ..lang.annotations import PTR, OUTPUTS
from .aliasing import byte_set
from .future import Completion, Future


def writes(kernel, name: str) -> bool:
    return kernel.param(name).kind in (*OUTPUTS, PTR)


def accesses(kernel, bound, extra=()):
    """(tensor, is_write) of a launch: its arguments, then `extra` tensors it writes
    (the runtime's own, e.g. S16's ticket counters)."""
    return [(f.tensor, writes(kernel, name)) for name, f in bound.tensors.items()] + [(t, True) for t in extra]


def byte_sets(kernel, bound, extra=()) -> list:
    """The byte sets of a launch's accesses, in `accesses` order: made once per launch for
    both `order_before` and `record_after`."""
    return [t._byte_set() for t, _ in accesses(kernel, bound, extra)]


def order_before(kernel, bound, stream, extra=(), sets=None) -> None:
    """Make `stream` wait for pending conflicting accesses issued on other streams."""
    acc = accesses(kernel, bound, extra)
    for (t, write), byteset in zip(acc, sets if sets is not None else [t._byte_set() for t, _ in acc]):
        if t._state._pending:             # nothing pending: nothing to wait for
            t._state.order_device(byteset, write, stream.cuda_stream)


def record_after(kernel, bound, stream, outputs, extra=(), sets=None) -> Future:
    """Register the launch's accesses as pending; its event is recorded only when needed."""
    acc = accesses(kernel, bound, extra)
    done = Completion(None, stream.cuda_stream, tuple(t._torch() for t, _ in acc), stream)
    for (t, write), byteset in zip(acc, sets if sets is not None else [t._byte_set() for t, _ in acc]):
        t._state.record(byteset, write, done)
    return Future(outputs, done)


# -- device work tilesafe issues itself ---------------------------------------------------------
# Fills (ts.zeros, ts.full, ...), the copy behind `y[...] = src`, conversions and clones run
# on the current stream like a launch, so they are ordered and recorded like one: a launch
# on another stream that reads the filled bytes waits for the fill (S10), and a later writer
# of a copy's source waits for the copy. Before such work the host has already waited for
# the conflicting accesses (S9), or the memory is new. `accesses`: (StorageState, torch view,
# is_write).

def record_work(accesses) -> None:
    """After the work: register its accesses as pending on the current stream. On the CPU
    the work is finished when it returns, so there is nothing to record.

    The memory stays alive through torch's caching allocator (`record_stream`), not through
    the completion: a completion holding the tensors would sit in their own states' registries,
    a cycle through torch's storages that Python's collector cannot see, so a tensor filled and
    dropped would never be freed. With `record_stream` a dropped block is handed out again only
    after the work queued on this stream finished (on its own stream, it is ordered anyway)."""
    cuda = [a for a in accesses if a[1].is_cuda]
    if not cuda:
        return
    import torch
    stream = torch.cuda.current_stream(cuda[0][1].device)
    done = Completion(None, stream.cuda_stream, (), stream)
    for state, view, write in cuda:
        view.record_stream(stream)
        state.record(byte_set(view), write, done)
