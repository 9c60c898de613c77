"""The bookkeeping that lets a launch's memory go once the launch is known done
(runtime/future.py, `Holding`), on the CPU with stand-in events and streams.

Before it, a completion nobody waited for held its tensors while it sat in their own pending
registries, which nothing pruned once the tensors were no longer used: memory used only by
launches whose results nobody reads stayed allocated for good. The GPU side is
tests/gpu/test_runtime_soundness_gpu.py (memory stays bounded, and pending memory stays alive).
"""
import gc
import weakref

import pytest

from tilesafe.runtime import future
from tilesafe.runtime.future import Completion, Holding


class Stream:
    """A stand-in torch stream (no device_index: device sync epochs do not apply): its work
    runs in order, and `progress` says how many of its launches the GPU has finished."""
    def __init__(self):
        self.issued = 0
        self.progress = 0


class Event:
    """A stand-in CUDA event after a stream's latest launch: done once the stream got there."""
    def __init__(self, stream=None):
        self.stream = stream if stream is not None else Stream()
        self.stream.issued += 1
        self.at = self.stream.issued
        self.queries = 0

    def query(self):
        self.queries += 1
        return self.stream.progress >= self.at

    def synchronize(self):
        self.stream.progress = max(self.stream.progress, self.at)


class Buffer:
    """Stands in for a launch's tensor: what a completion keeps alive."""


@pytest.fixture
def holding(monkeypatch):
    h = Holding(limit=4)
    monkeypatch.setattr(future, "HOLDING", h)
    return h


def _launch(stream_handle, keep, stream_obj=None):
    """A completion like a launch's, with its event already made (so nothing calls CUDA)."""
    stream_obj = stream_obj if stream_obj is not None else Stream()
    return Completion(Event(stream_obj), stream_handle, (keep,), stream_obj)


def test_memory_of_launches_nobody_waits_for_is_released_once_known_done(holding):
    bufs = [Buffer() for _ in range(4)]
    refs = [weakref.ref(b) for b in bufs]
    stream = Stream()
    launches = [_launch(7, b, stream) for b in bufs]    # the 4th reaches the limit: a sweep
    del bufs
    gc.collect()
    assert all(r() is not None for r in refs), "memory of launches still running was released"
    assert len(holding) == 4
    stream.progress = 4                                 # the GPU finished them (nobody asked)
    more = [_launch(7, Buffer(), stream) for _ in range(2)]   # the next sweep: at half as many again
    gc.collect()
    assert [r() for r in refs] == [None] * 4            # released, though nobody waited or read
    assert all(c._done for c in launches) and not any(c._done for c in more)
    assert len(holding) == 2


def test_a_completion_known_done_releases_those_before_it_on_its_stream_only(holding):
    first = Buffer()
    other = Buffer()
    ref_first, ref_other = weakref.ref(first), weakref.ref(other)
    s, t = Stream(), Stream()
    on_s = _launch(1, first, s)
    on_t = _launch(2, other, t)                         # another stream: no order with s
    waited = _launch(1, Buffer(), s)
    waited.wait()                                       # someone waited for the later launch on s
    del first, other
    _launch(2, Buffer(), t)                             # the 4th: a sweep
    gc.collect()
    assert ref_first() is None and on_s._done           # before a done launch on its stream: done
    assert ref_other() is not None and not on_t._done   # t's launches are still running
    assert len(holding) == 2


def test_nothing_is_held_without_memory_and_nothing_polls_below_the_limit(holding):
    Completion(Event(), 3, (), Stream())                # a fill's completion holds nothing
    assert len(holding) == 0
    c = _launch(3, Buffer())
    _launch(3, Buffer())
    assert len(holding) == 2 and c.event.queries == 0   # below the limit: no CUDA call at all


def test_release_synchronized_lets_go_of_launches_a_device_sync_finished(holding, monkeypatch):
    """After a full device synchronisation (`device_synchronized`), what was issued before is
    released at once, without polling (an engine dropped after its last replays); a launch
    issued after the synchronisation keeps its memory."""
    monkeypatch.setattr(future, "_synced", {})

    class DeviceStream(Stream):
        device_index = 0
    stream = DeviceStream()
    bufs = [Buffer() for _ in range(3)]
    refs = [weakref.ref(b) for b in bufs]
    before = [Completion(None, 7, (b,), stream) for b in bufs[:2]]     # no event: never polled
    future.device_synchronized(0)
    after = Completion(None, 7, (bufs[2],), stream)
    del bufs
    holding.release_synchronized()
    gc.collect()
    assert [r() is None for r in refs] == [True, True, False]
    assert all(c._done for c in before) and not after._done and len(holding) == 1
