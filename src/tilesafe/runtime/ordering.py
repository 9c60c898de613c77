"""S9/S10 on a GPU: order each launch after the conflicting work before it, and record it.

Tracking is by storage byte ranges (`StorageState`), not by handles, so views and aliases
are covered. Work on the same stream is already ordered by the stream; only a conflict on
another stream costs a `wait_event`. A launch's event is recorded only when something
waits for it, and its completion keeps the launch's tensors alive until the GPU is done.
"""
from __future__ import annotations

from ..lang.annotations import PTR, OUTPUTS
from .future import Completion, Future


def writes(kernel, name: str) -> bool:
    return kernel.param(name).kind in (*OUTPUTS, PTR)


def accesses(kernel, bound, extra=()):
    """(tensor, is_write) of a launch: its arguments, then `extra` tensors it writes
    (the runtime's own, e.g. S16's ticket counters)."""
    return [(f.tensor, writes(kernel, name)) for name, f in bound.tensors.items()] + [(t, True) for t in extra]


def order_before(kernel, bound, stream, extra=()) -> None:
    """Make `stream` wait for pending conflicting accesses issued on other streams."""
    for t, write in accesses(kernel, bound, extra):
        t._state.order_device(t._byte_set(), write, stream.cuda_stream)


def record_after(kernel, bound, stream, outputs, extra=()) -> Future:
    """Register the launch's accesses as pending; its event is recorded only when needed."""
    acc = accesses(kernel, bound, extra)
    done = Completion(None, stream.cuda_stream, tuple(t._torch() for t, _ in acc), stream)
    for t, write in acc:
        t._state.record(t._byte_set(), write, done)
    return Future(outputs, done)
