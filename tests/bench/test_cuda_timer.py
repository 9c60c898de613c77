"""The CUDA clock's control flow with torch.cuda faked (no GPU here): events around each
eager launch behind a sleep, graphs captured by the right mechanism and replayed, and the
per-launch division. The GPU semantics themselves are exercised on the H200."""
import contextlib
import types

import pytest
import torch

import tilesafe
from tilesafe.bench import cuda_timer


class FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        FakeEvent.clock[0] += 0.5                  # 0.5 ms between consecutive records
        self.t = FakeEvent.clock[0]

    def elapsed_time(self, other):
        return other.t - self.t


@pytest.fixture
def fake_cuda(monkeypatch):
    log = []

    @contextlib.contextmanager
    def graph(g, **kwargs):
        log.append("torch capture")
        yield

    @contextlib.contextmanager
    def ts_graph():
        log.append("ts capture")
        yield types.SimpleNamespace(replay=lambda: log.append("ts replay"))

    class Graph:
        def replay(self):
            log.append("torch replay")

    fakes = dict(Event=FakeEvent, synchronize=lambda: None, _sleep=lambda cycles: log.append(("sleep", cycles)),
                 CUDAGraph=Graph, graph=graph, Stream=lambda: types.SimpleNamespace(wait_stream=lambda s: None),
                 stream=lambda s: contextlib.nullcontext(),
                 current_stream=lambda: types.SimpleNamespace(wait_stream=lambda s: None))
    for name, value in fakes.items():
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
    monkeypatch.setattr(tilesafe, "graph", ts_graph)
    return log


def test_eager_samples_bracket_each_launch_behind_a_sleep(fake_cuda):
    timer = cuda_timer.CudaTimer()
    assert timer.cycles_per_us >= cuda_timer.BOOST_MHZ
    launched = []
    samples = timer.eager(launched.append, 4)
    assert launched == [0, 1, 2, 0, 1, 2, 3]        # 3 host-cost probes, then the samples
    assert samples == [500.0] * 4                    # one 0.5 ms event gap each, in us
    assert [e for e in fake_cuda if isinstance(e, tuple)][-1][0] == "sleep" and timer.note == ""


@pytest.mark.parametrize("capture, what", [("tilesafe", "ts"), ("torch", "torch")])
def test_graph_samples_are_replays_divided_by_their_launches(fake_cuda, capture, what):
    launched = []
    samples = cuda_timer.CudaTimer().graph(launched.append, per_graph=10, reps=3, capture=capture)
    assert f"{what} capture" in fake_cuda and fake_cuda.count(f"{what} replay") == 2 + 3
    assert launched == ([0] if capture == "torch" else []) + list(range(10))   # torch warms up first
    assert samples == [pytest.approx(50.0)] * 3      # 0.5 ms per replay / 10 launches
