"""S9/S10 for `g.replay()` at O(1) host cost: a graph's accesses stand in the registries once
per stream (runtime/graph_registry.py), and its ordering is skipped while no registry gained
pending work. These tests pin the rules that must not change with it: host reads and writes
wait for the *latest* replay, another stream's pending work is still ordered before a replay,
and a replay does no per-tensor registry work.

The graph is the real `Graph` with only its device hooks stood in (no CUDA here): the current
stream is a raw handle chosen by the test, and a replay's completion carries a `FakeEvent`
the test finishes or that a host wait finishes. The stream waits that S10 issues go to a
recorder (`torch.cuda.current_stream` patched).
"""
import contextlib
import gc
import sys

import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe.runtime.aliasing import byte_set, overlaps
from tilesafe.runtime.future import Completion, device_synchronized
from tilesafe.runtime.graph import Graph, capturing
from tilesafe.runtime.graph_registry import merged_accesses
from tilesafe.runtime.storage_state import StorageState

DEVICE = 11             # the device index the stand-in capture "synchronises"
STREAM, OTHER = 4242, 77


class FakeEvent:
    """A CUDA event stand-in: unfinished until `finish()` or a host wait."""

    def __init__(self):
        self.finished = False
        self.waits = 0

    def query(self):
        return self.finished

    def synchronize(self):
        self.waits += 1
        self.finished = True

    def finish(self):
        self.finished = True


class FakeStream:
    device_index = DEVICE


class StandInGraph(Graph):
    """The real replay path (ordering, standing accesses) with a stand-in CUDA graph: a
    replay runs on `self.stream` and completes when its event (`self.events[-1]`) does."""
    backend = "reference"

    def __init__(self, stream=STREAM):
        super().__init__()
        self.stream = stream
        self.events: list[FakeEvent] = []

    @contextlib.contextmanager
    def _capture_on_device(self):
        device_synchronized(DEVICE)
        yield

    def _on_capture_stream(self) -> bool:
        return True

    def _on_capture_device(self, device) -> bool:
        return True

    def _current_stream(self):
        return self.stream, FakeStream()

    def _launch(self, stream, stream_obj):
        self.events.append(FakeEvent())
        return Completion(self.events[-1], stream, self._held, stream_obj)


class StreamWaits:
    """Records the events S10 makes the current stream wait for."""

    def __init__(self):
        self.events = []

    def wait_event(self, event):
        self.events.append(event)


@pytest.fixture
def waits(monkeypatch):
    recorder = StreamWaits()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: recorder)
    return recorder


def here() -> int:
    return sys._getframe(1).f_lineno


def captured(accesses, stream=STREAM) -> StandInGraph:
    """A graph whose capture recorded these (tensor, is_write) accesses."""
    g = StandInGraph(stream)
    with capturing(g):
        for t, is_write in accesses:
            g.record(t, is_write)
    return g


def pending_on_other_stream(t: ts.Tensor, is_write: bool) -> FakeEvent:
    """An unfinished eager launch on stream OTHER that reads or writes `t`."""
    event = FakeEvent()
    t._state.record(t._byte_set(), is_write, Completion(event, OTHER, (), FakeStream()))
    return event


def assert_implicit_wait_refused(access, what):
    with ts.strict_sync():
        with pytest.raises(ts.OwnershipError) as info:
            line = here() + 1
            access()
    assert f"an implicit wait on pending device work was needed for {what}" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line


# -- O(1) per replay ------------------------------------------------------------------------------

def test_a_replay_does_no_per_tensor_registry_work(monkeypatch, waits):
    """400 captured tensors (a decode step's weights, caches and activations): after the first
    replay on a stream, a replay neither records, registers nor orders any of them."""
    tensors = [ts.zeros(16) for _ in range(400)]
    g = captured([(t, i % 5 == 0) for i, t in enumerate(tensors)])
    calls = {"record": 0, "stand": 0, "order_device": 0}
    for name in calls:
        real = getattr(StorageState, name)

        def counted(self, *args, _real=real, _name=name):
            calls[_name] += 1
            return _real(self, *args)
        monkeypatch.setattr(StorageState, name, counted)
    g.replay()
    assert calls["stand"] == 400 and calls["record"] == 0       # registered once, for this stream
    calls.update(dict.fromkeys(calls, 0))
    for _ in range(50):
        g.replay()
    assert calls == {"record": 0, "stand": 0, "order_device": 0}
    assert all(len(t._state._pending) == 1 for t in tensors)    # one standing entry each, not one per replay
    assert waits.events == []


def test_replays_alternating_between_graphs_on_one_stream_order_no_tensor(monkeypatch, waits):
    """A serving engine replays a bucket's graph after another's, and every graph reads the
    same weights: each weight then holds a standing entry per graph, all on the replay's own
    stream, which orders them by itself, so the switch looks at no entry (walking them cost
    ~1 ms a switch on the H200) — while another stream's pending write is still ordered."""
    tensors = [ts.zeros(16) for _ in range(400)]
    graphs = [captured([(t, i % 5 == 0) for i, t in enumerate(tensors)]) for _ in range(4)]
    for g in graphs:
        g.replay()
    calls = []
    real = StorageState.order_device
    monkeypatch.setattr(StorageState, "order_device",
                        lambda self, *args: (calls.append(self), real(self, *args))[1])
    for _ in range(5):
        for g in graphs:
            g.replay()
    assert calls == [] and waits.events == []
    event = pending_on_other_stream(tensors[3], True)          # now one tensor has other-stream work
    graphs[0].replay()
    assert calls == [tensors[3]._state] and waits.events == [event]


# -- S9: the host waits for the latest replay ----------------------------------------------------

def test_a_host_read_of_a_graph_written_tensor_waits_for_the_latest_replay():
    z, x = ts.zeros(32), ts.tensor(np.arange(32, dtype=np.float32))
    g = captured([(z, True), (x, False)])
    g.replay()
    g.events[0].finish()
    g.replay()                                                  # unfinished
    assert_implicit_wait_refused(z.numpy, "`numpy()`")
    assert g.events[1].waits == 0
    z.numpy()
    assert g.events[1].waits == 1                               # waited for the second replay
    with ts.strict_sync():
        z.numpy()                                               # nothing pending any more
        x.numpy()                                               # the graph only reads x


def test_a_same_stream_launch_of_the_same_bytes_does_not_hide_the_next_replay():
    """An eager launch on the replay's stream writing the same bytes supersedes older entries
    of that stream: it must not supersede the graph's, whose next replay comes after it."""
    z = ts.zeros(32)
    g = captured([(z, True)])
    g.replay()
    eager = FakeEvent()
    z._state.record(z._byte_set(), True, Completion(eager, STREAM, (), FakeStream()))
    g.replay()
    eager.finish()
    g.events[0].finish()
    assert_implicit_wait_refused(z.numpy, "`numpy()`")          # the second replay still writes z
    z.numpy()
    assert g.events[1].waits == 1


def test_a_host_write_to_a_tensor_the_graph_reads_waits_for_the_replay():
    w, out = ts.tensor(np.ones(32, np.float32)), ts.zeros(32)
    g = captured([(w, False), (out, True)])                     # e.g. a weight and an activation
    g.replay()
    with ts.strict_sync():
        with pytest.raises(ts.OwnershipError) as info:
            line = here() + 1
            w[0] = 2.0
    assert "an implicit wait on pending device work was needed for `x[...] = value`" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    with ts.strict_sync():
        w.numpy()                                               # a read does not wait for readers
    w[0] = 2.0                                                  # waits for the replay reading w
    assert g.events[0].waits == 1
    assert w.numpy()[0] == 2.0


# -- S10: the replay is ordered after other streams' work ------------------------------------------

def test_another_streams_pending_write_is_ordered_before_the_next_replay(waits):
    w, out = ts.tensor(np.ones(32, np.float32)), ts.zeros(32)
    g = captured([(w, False), (out, True)])
    g.replay()
    g.replay()
    assert waits.events == []                                   # nothing on other streams
    writer = pending_on_other_stream(w, True)                   # e.g. a weight update on a side stream
    g.replay()
    assert waits.events == [writer]
    reader = pending_on_other_stream(w, False)                  # reads w: no conflict with the replay's read
    g.replay()
    assert waits.events == [writer, writer]                     # the writer is still pending
    writer.finish()
    reader_of_out = pending_on_other_stream(out, False)         # reads what the replay writes
    g.replay()
    assert waits.events == [writer, writer, reader_of_out]
    assert reader.waits == 0


def test_a_replay_waits_for_another_graphs_latest_replay_on_another_stream(waits):
    """Graph b writes what graph a reads, on another stream. b's later replays register
    nothing (they re-point its standing entries), yet a's next replay must wait for them."""
    x, y, z = ts.zeros(32), ts.zeros(32), ts.zeros(32)
    a = captured([(x, False), (y, True)], STREAM)
    b = captured([(z, False), (x, True)], OTHER)
    a.replay()
    b.replay()                                                  # writes x while a may read it
    assert waits.events == [a.events[0]]
    a.replay()
    assert waits.events[-1] is b.events[0]
    b.replay()
    assert waits.events[-1] is a.events[1]                      # a's read before b's write
    a.replay()
    assert waits.events[-1] is b.events[1]                      # b's latest replay
    a.events[-1].finish()
    b.events[-1].finish()
    n = len(waits.events)
    a.replay()
    assert len(waits.events) == n                               # all finished: nothing to wait for


def test_a_replay_on_another_stream_waits_for_the_replays_on_the_first():
    z, w = ts.zeros(32), ts.zeros(32)
    g = captured([(z, True), (w, False)])
    g.replay()
    g.stream = OTHER
    recorder = StreamWaits()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch.cuda, "current_stream", lambda *a, **k: recorder)
        g.replay()
    assert recorder.events == [g.events[0]]                     # its write of z, on STREAM
    g.events[1].finish()
    assert_implicit_wait_refused(z.numpy, "`numpy()`")          # the first stream's replay is pending
    z.numpy()
    assert g.events[0].waits == 1


# -- the registries ------------------------------------------------------------------------------

def test_a_dropped_graphs_entries_leave_the_registry_once_done():
    z = ts.zeros(32)
    g = captured([(z, True)])
    g.replay()
    g.events[0].finish()
    with ts.strict_sync():
        z.numpy()
    assert len(z._state._pending) == 1                          # kept while the graph lives
    events = g.events
    del g
    gc.collect()
    z.numpy()                                                   # prunes
    assert z._state._pending == [] and events[0].waits == 0


def test_a_dropped_graphs_unfinished_replay_is_still_waited_for():
    z = ts.zeros(32)
    g = captured([(z, True)])
    g.replay()
    events = g.events
    del g
    gc.collect()
    assert_implicit_wait_refused(z.numpy, "`numpy()`")
    z.numpy()
    assert events[0].waits == 1


def test_pruning_a_full_registry_keeps_a_live_graphs_entry():
    z = ts.zeros(32)
    g = captured([(z, True)])
    g.replay()
    g.events[0].finish()
    for i in range(40):                                         # finished launches on many streams
        done = FakeEvent()
        done.finish()
        z._state.record(z._byte_set(), False, Completion(done, 1000 + i, (), FakeStream()))
    assert sum(p.standing for p in z._state._pending) == 1
    g.replay()
    assert_implicit_wait_refused(z.numpy, "`numpy()`")


# -- merging per storage is exact -----------------------------------------------------------------

def test_merged_accesses_conflict_exactly_like_the_captured_ones():
    t = ts.zeros((8, 16))
    u = ts.zeros(64)
    a = [(t[0:2], False), (t[2:4], False), (t[5:6], False),      # touching rows: one range; row 5 apart
         (t[1:3], True), (t[:, ::2], False), (t[:, ::2], False),  # a strided read (twice)
         (t[6:8], True), (t[7], False),                           # a read inside a write: dropped
         (u[0:0], True), (u[8:16], False)]                        # an empty view touches nothing
    merged = merged_accesses(a)
    assert len([m for m in merged if m[0] is t._state]) == 5     # rows 0-4 read, row 5, strided; two writes
    assert len([m for m in merged if m[0] is u._state]) == 1
    probes = [t[i:i + 1, j:j + 3] for i in range(8) for j in range(0, 16, 3)] + [t[:, 1::2], t[4], u[0:8], u[4:10]]
    for probe in probes:
        bs = probe._byte_set()
        for write in (False, True):
            before = any(overlaps(byte_set(v._torch()), bs) for v, w in a if write or w)
            after = any(overlaps(m, bs) for _, m, w in merged if write or w)
            assert before == after, (probe._torch().shape, write)
