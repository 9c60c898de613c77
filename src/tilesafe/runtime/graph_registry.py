"""What a graph's replays leave pending in the storage registries (S9/S10), at O(1) a replay.

A replayed decode step touches hundreds of tensors. Registering each of them at every replay
(as a launch does) cost milliseconds of host time per replay, more than the GPU spent on the
step. Instead a graph registers its accesses once per stream, as *standing* entries whose
future is a `Standing`: it answers for the graph's latest replay on that stream. A stream
runs its work in order, so once that replay finished every earlier one did too; a host read
or another stream's launch that conflicts waits for it exactly as it waited for a replay's
own entry before. A replay then only points its `Standing` at its new completion.

The accesses are merged per storage at the end of the capture, exactly: byte ranges that
are each contiguous and meet become one range, and a read inside a written range is left
out (whatever conflicts with the read conflicts with the write of the same replay).
"""
from __future__ import annotations

from .aliasing import ByteSet, dense_span


class Standing:
    """The future of a graph's standing accesses on one stream: its latest replay there.
    `live` is False once the graph is gone: the registries then drop the entries once done."""
    __slots__ = ("stream", "latest", "live")

    def __init__(self, stream, latest):
        self.stream = stream          # raw handle, as a Completion's (None: work already done)
        self.latest = latest          # the Completion of the newest replay on that stream
        self.live = True

    def done(self) -> bool:
        return self.latest.done()

    def wait(self) -> None:
        self.latest.wait()

    def ready_event(self):
        return self.latest.ready_event()


def merged_accesses(accesses) -> list[tuple]:
    """(StorageState, ByteSet, is_write) per distinct access of (tensor, is_write) pairs,
    merged per storage: meeting contiguous ranges of one kind joined, reads a write covers
    dropped, other (strided) byte sets kept as they are. Empty views touch nothing."""
    groups: dict = {}                 # id(state) -> (state, {is_write: [ByteSet]})
    for t, is_write in accesses:
        state = t._state
        group = groups.get(id(state))
        if group is None:
            group = groups[id(state)] = (state, {False: [], True: []})
        group[1][is_write].append(t._byte_set())
    merged = []
    for state, kinds in groups.values():
        writes = _merge_kind(kinds[True])
        spans = [dense_span(bs) for bs in writes]
        ranges = [s for s in spans if s is not None]
        for bs in _merge_kind(kinds[False]):
            span = dense_span(bs)
            if span is None or not any(lo <= span[0] and span[1] <= hi for lo, hi in ranges):
                merged.append((state, bs, False))
        merged.extend((state, bs, True) for bs in writes)
    return merged


def _merge_kind(sets: list[ByteSet]) -> list[ByteSet]:
    """Contiguous ranges that overlap or touch become one range; the rest stay (deduplicated)."""
    ranges, strided = [], []
    for bs in sets:
        if bs.numel == 0:
            continue
        span = dense_span(bs)
        if span is None:
            if bs not in strided:
                strided.append(bs)
        else:
            ranges.append((span, bs))
    ranges.sort(key=lambda r: r[0])
    out: list[ByteSet] = []
    lo = hi = None
    first = None
    for (start, end), bs in ranges:
        if hi is not None and start <= hi:
            hi = max(hi, end)
            continue
        if hi is not None:
            out.append(_range(first, lo, hi))
        lo, hi, first = start, end, bs
    if hi is not None:
        out.append(_range(first, lo, hi))
    return out + strided


def _range(like: ByteSet, lo: int, hi: int) -> ByteSet:
    """Bytes [lo, hi) (absolute addresses) of `like`'s storage, as one byte-wide axis."""
    if dense_span(like) == (lo, hi):
        return like                   # unchanged: keep the captured set itself
    return ByteSet(like.device, like.storage, like.storage_nbytes, lo - like.storage, (hi - lo,), (1,), 1)
