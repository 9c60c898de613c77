"""Per-thread, per-device fp32 scratch for a library call's intermediate results
(split-K partial products, a long softmax row's statistics), reused by every call instead
of allocated.

Reuse is safe: the runtime orders each launch after the pending ones that use the same
bytes (S9/S10), so a call's scratch is never overwritten while an earlier call still reads
it. Inside `ts.graph()` the scratch must already be large enough, since a capture may not
allocate (S12): make one call of the same shape before the capture (a warm-up).
"""
from __future__ import annotations

import math
import threading

import tilesafe as ts

from .layout import strided

MIN_ELEMS = 1 << 20          # the first buffer: 4 MiB, enough for most decode-time calls
# One set of buffers per thread: a call's launches write then read its scratch, and another
# thread's call between them must not take the same bytes (runtime/host_lock.py). Thread-local,
# so a thread's buffers are freed when it ends (pending launches keep their memory alive).
_LOCAL = threading.local()


def buffers() -> dict:
    """This thread's scratch buffers: device -> fp32 tilesafe tensor."""
    found = getattr(_LOCAL, "buffers", None)
    if found is None:
        found = _LOCAL.buffers = {}
    return found


def views(device: str, *shapes) -> list[ts.Tensor]:
    """Contiguous fp32 views of the given shapes, side by side in the device's scratch
    (grown when too small)."""
    sizes = [math.prod(s) for s in shapes]
    mine = buffers()
    buf = mine.get(device)
    if buf is None or buf.numel < sum(sizes):
        # Zeros, not `ts.empty`: an uninitialised buffer keeps a per-byte S14 mask that a call's
        # few written bytes never fill, and every launch writing into it then scanned the whole
        # mask (two 4 MiB scans per long-row softmax: 1.5 ms of host time per call on the H200).
        buf = mine[device] = ts.zeros((max(sum(sizes), MIN_ELEMS),), ts.f32, device)
    out, at = [], 0
    for shape, n in zip(shapes, sizes):
        shape = tuple(shape)
        out.append(strided(buf[at:at + n], shape, _row_major(shape)))
        at += n
    return out


def _row_major(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))
