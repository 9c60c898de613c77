"""S16's ticket counters: one int32 per group of a `ts.last_arrival()` launch, zero at rest.

Each block of a group adds one to its group's counter; the block that draws the last
ticket sets it back to zero, so every launch finds (and leaves) the counters at zero. The
buffer is per device, shared by every such launch, and is a tilesafe tensor that each
launch writes: the runtime orders two launches that use it, also on different streams
(S10), so their tickets never mix. It grows when a launch has more groups; inside
`ts.graph()` it must already be large enough (S12): launch the kernel once before capturing.
"""
from __future__ import annotations

from ..errors import LaunchError
from ..settings import graph_var

MIN_GROUPS = 1 << 12
_BUFFERS: dict = {}          # str(device) -> tilesafe int32 tensor of zeros


def counters(device, groups: int):
    """The device's counters (a tilesafe tensor), at least `groups` of them (the backend
    counts a launch's groups: `Launch.tickets`)."""
    key = str(device)
    buf = _BUFFERS.get(key)
    if buf is not None and buf.numel >= groups:
        return buf
    if graph_var.get() is not None:
        raise LaunchError(f"this launch needs {groups} last-arrival counters, more than exist before the capture "
                          f"({buf.numel if buf is not None else 0})",
                          help="launch the kernel once with the same grid before ts.graph(), so the counters are "
                               "allocated outside the capture (S12)")
    from .constructors import zeros
    from .. import dtypes as dt
    size = max(MIN_GROUPS, 1 << (int(groups) - 1).bit_length())
    buf = _BUFFERS[key] = zeros((size,), dt.i32, key)
    return buf
