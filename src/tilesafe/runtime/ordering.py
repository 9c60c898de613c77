"""S9/S10 on a GPU: order each launch after the conflicting work before it, and record it.

Tracking is by storage byte ranges (`StorageState`), not by handles, so views and aliases
are covered. Work on the same stream is already ordered by the stream; only a conflict on
another stream costs a `wait_event`. A launch's event is recorded only when something
waits for it, and its completion keeps the launch's tensors alive until the GPU is done.
"""
from __future__ import annotations

from ..lang.annotations import MUT, MUT_TILES, PTR
from .future import Completion, Future


def writes(kernel, name: str) -> bool:
    return kernel.param(name).kind in (MUT, MUT_TILES, PTR)


def order_before(kernel, bound, stream) -> None:
    """Make `stream` wait for pending conflicting accesses issued on other streams."""
    for name, f in bound.tensors.items():
        t = f.tensor
        t._state.order_device(t._byte_set(), writes(kernel, name), stream.cuda_stream)


def record_after(kernel, bound, stream, outputs) -> Future:
    """Register the launch's accesses as pending; its event is recorded only when needed."""
    keep = tuple(f.tensor._torch() for f in bound.tensors.values())
    done = Completion(None, stream.cuda_stream, keep, stream)
    for name, f in bound.tensors.items():
        t = f.tensor
        t._state.record(t._byte_set(), writes(kernel, name), done)
    return Future(outputs, done)
