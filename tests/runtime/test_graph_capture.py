"""S12/S14 inside `ts.graph()`: what a capture marks written and when, what it refuses.

`ts.graph()` needs a GPU, but the rules tested here are host-side bookkeeping, so these
tests capture into `CpuGraph`: the real `Graph` with its three device hooks (begin the
capture, the current stream, replay) replaced by stand-ins. Its launches run on a CPU
backend at once — a real capture only records them — so the values a test reads after
`g.replay()` come from that run; what is tested is what the runtime *allows*: reading a
captured output before the first replay, reading it after a failed capture, allocating,
polling, another stream. The same rules on a real GPU capture are in
tests/gpu/test_graph_soundness_gpu.py.
"""
import contextlib
import sys

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.runtime.future import Completion, device_synchronized
from tilesafe.runtime.graph import Graph, capturing

N, B = 100, 32            # ragged: the last tile is partly outside
FAKE_DEVICE = 7           # the device index the stand-in capture "synchronises"


@ts.kernel
def scale(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, a: float):
    z.store(ts.load_tile_like(x, z) * a)


class CpuGraph(Graph):
    """A `Graph` whose device part is a stand-in: launches run on `backend` (a CPU one) at
    once, `on_stream` says whether they are on the capture's stream, replay does nothing
    on a device. Entering it synchronises FAKE_DEVICE, as a real capture does its GPU."""

    def __init__(self, backend: str, on_stream: bool = True, on_device: bool = True):
        super().__init__()
        self.backend = backend
        self.on_stream = on_stream
        self.on_device = on_device
        self.device_replays = 0

    @contextlib.contextmanager
    def _capture_on_device(self):
        device_synchronized(FAKE_DEVICE)
        yield

    def _on_capture_stream(self) -> bool:
        return self.on_stream

    def _on_capture_device(self, device) -> bool:
        return self.on_device

    def _device_name(self) -> str:
        return "cuda:1"

    def _replay_on_device(self) -> Completion:
        self.device_replays += 1
        return Completion()


class PollingForbidden:
    """A stand-in CUDA event and stream: any poll or wait fails the test."""

    def __init__(self, device_index: int):
        self.device_index = device_index
        self.polled = 0

    def query(self):
        self.polled += 1
        raise AssertionError("the event was polled inside a capture")

    synchronize = query


def here() -> int:
    return sys._getframe(1).f_lineno


def inputs(n=N, seed=0):
    values = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return ts.tensor(values), values


def assert_unwritten_read(info, line):
    assert "has not been written" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line


# -- S14: a captured launch writes at replay ------------------------------------------------

def test_a_captured_output_is_unwritten_until_the_first_replay(backend):
    x, xv = inputs()
    z = ts.empty(N)
    g = CpuGraph(backend)
    with capturing(g):
        p = z.partition((B,))
        scale(p, x, a=2.0)
    z = p.unpartition()
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        z.numpy()
    assert_unwritten_read(info, line)
    out = ts.empty(N)
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        scale(out.partition((B,)), z, a=1.0)
    assert "argument `x` of `scale` is read, but it came from ts.empty and has not been written" \
        in info.value.message and info.value.loc.line == line
    g.replay()
    assert g.device_replays == 1
    np.testing.assert_allclose(z.numpy(), xv * 2.0, rtol=1e-6)


def test_a_failed_capture_never_marks_its_outputs_and_cannot_replay(backend):
    x, _ = inputs()
    z = ts.empty(N)
    g = CpuGraph(backend)
    with pytest.raises(ZeroDivisionError):
        with capturing(g):
            p = z.partition((B,))
            scale(p, x, a=2.0)
            1 / 0
    z = p.unpartition()
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        z.numpy()
    assert_unwritten_read(info, line)
    with pytest.raises(ts.LaunchError) as info:
        line = here() + 1
        g.replay()
    assert "its capture did not complete" in info.value.message and info.value.loc.line == line
    assert g.device_replays == 0
    with pytest.raises(ts.OwnershipError):
        z.numpy()                                                  # still unwritten


def test_a_captured_launch_may_read_what_an_earlier_captured_launch_wrote(backend):
    x, xv = inputs()
    mid, out = ts.empty(N), ts.empty(N)
    g = CpuGraph(backend)
    with capturing(g):
        p = mid.partition((B,))
        scale(p, x, a=2.0)
        mid = p.unpartition()
        q = out.partition((B,))
        scale(q, mid, a=3.0)                                       # the graph runs them in order
    out = q.unpartition()
    g.replay()
    np.testing.assert_allclose(out.numpy(), xv * 6.0, rtol=1e-6)
    np.testing.assert_allclose(mid.numpy(), xv * 2.0, rtol=1e-6)


def test_reading_bytes_a_capture_wrote_only_in_part_is_refused_at_capture(backend):
    x64, _ = inputs(64)
    z, out = ts.empty(N), ts.empty(N)
    g = CpuGraph(backend)
    with capturing(g):
        head = z[:64]
        p = head.partition((B,))
        scale(p, x64, a=2.0)                                       # writes z[:64] only
        p.unpartition()
        with pytest.raises(ts.OwnershipError) as info:
            line = here() + 1
            scale(out.partition((B,)), z, a=1.0)
    assert "argument `x` of `scale` is read" in info.value.message and info.value.loc.line == line


def test_a_launch_checked_inside_a_capture_is_not_repeated_eagerly_unchecked(backend):
    """A plan made inside the capture counted writes that happen at replay; reusing it for
    the same arguments before the replay would skip the S14 check."""
    x, _ = inputs()
    z, out = ts.empty(N), ts.zeros(N)
    g = CpuGraph(backend)
    with capturing(g):
        p = z.partition((B,))
        scale(p, x, a=2.0)
        z = p.unpartition()
        q = out.partition((B,))
        scale(q, z, a=3.0)
    with pytest.raises(ts.OwnershipError) as info:
        line = here() + 1
        scale(q, z, a=3.0)
    assert "has not been written" in info.value.message and info.value.loc.line == line
    g.replay()
    scale(q, z, a=3.0).sync()                                      # written now: accepted


# -- S12: library calls take out= inside a capture ------------------------------------------

def test_a_library_call_without_out_is_refused_inside_a_capture(backend):
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal(64).astype(np.float32))
    g = CpuGraph(backend)
    with capturing(g):
        for xs, ws in ((x, w), (ts.from_torch(x), ts.from_torch(w))):   # torch and tilesafe tensors
            with pytest.raises(ts.OwnershipError) as info:
                line = here() + 1
                tk.rms_norm(xs, ws)
            assert info.value.message == "rms_norm: allocating its output `out` is not allowed while " \
                                         "capturing ts.graph()"
            assert "out=" in info.value.help
            assert info.value.loc.file == __file__ and info.value.loc.line == line
        y = torch.empty(4, 64)
        with pytest.raises(ts.OwnershipError) as info:
            line = here() + 1
            tk.rms_norm(x, w, residual=x.clone(), out=y)
        assert "allocating its output `residual_out`" in info.value.message and info.value.loc.line == line
        assert tk.rms_norm(x, w, out=y) is y                       # with out=: accepted


# -- S12: another stream, another backend ----------------------------------------------------

def test_entering_ts_stream_inside_a_capture_is_refused(backend):
    with capturing(CpuGraph(backend)):
        with pytest.raises(ts.LaunchError) as info:
            line = here() + 1
            ts.stream()
    assert "`with ts.stream():` is not allowed while capturing ts.graph()" in info.value.message
    assert "never at g.replay()" in info.value.message and info.value.loc.line == line
    with ts.stream():                                              # outside a capture: fine
        pass


def test_a_launch_on_another_stream_inside_a_capture_is_refused_and_changes_nothing(backend):
    x, _ = inputs()
    z = ts.empty(N)
    g = CpuGraph(backend, on_stream=False)                         # e.g. inside torch.cuda.stream(s)
    with capturing(g):
        p = z.partition((B,))
        with pytest.raises(ts.LaunchError) as info:
            line = here() + 1
            scale(p, x, a=2.0)
    assert "`scale` is launched on another stream than the one ts.graph() captures" in info.value.message
    assert info.value.loc.line == line
    assert g._accesses == [] and g._written == []                  # nothing recorded for the replay


def test_a_launch_on_another_device_than_the_capture_is_refused(backend):
    x, _ = inputs()
    z = ts.empty(N)
    g = CpuGraph(backend, on_device=False)                         # tensors on another GPU than captured
    with capturing(g):
        p = z.partition((B,))
        with pytest.raises(ts.LaunchError) as info:
            line = here() + 1
            scale(p, x, a=2.0)
    assert info.value.message == "argument `z` of `scale` is on cpu, but ts.graph() captures cuda:1: the launch " \
                                 "would run once now and never at g.replay()"
    assert info.value.loc.line == line
    assert g._written == []


def test_a_launch_on_a_backend_the_graph_cannot_replay_is_refused(backend):
    x, _ = inputs()
    other = "reference" if backend != "reference" else "triton-interpreter"
    z = ts.empty(N)
    with capturing(CpuGraph(other)):
        with pytest.raises(ts.LaunchError) as info:
            line = here() + 1
            scale(z.partition((B,)), x, a=2.0)
    assert f"`scale` runs on the {backend} backend, which ts.graph() cannot capture" in info.value.message
    assert info.value.loc.line == line


# -- S12: no polling inside a capture ---------------------------------------------------------

def test_future_polls_and_waits_are_refused_inside_a_capture(backend):
    x, _ = inputs()
    fut = scale(ts.empty(N).partition((B,)), x, a=2.0)            # eager, before the capture
    with capturing(CpuGraph(backend)):
        for call, name in ((fut.done, "fut.done()"), (fut.wait, "fut.wait()"), (fut.sync, "fut.sync()")):
            with pytest.raises(ts.OwnershipError) as info:
                line = here() + 1
                call()
            assert info.value.message == f"{name} waits for the GPU, which is not allowed while capturing ts.graph()"
            assert info.value.loc.line == line
        assert repr(fut) == "Future(done)"                         # repr never raises
    fut.sync()


def _pending_write(t: ts.Tensor, device_index: int) -> PollingForbidden:
    """Register an unfinished launch writing `t` whose event must never be polled."""
    fake = PollingForbidden(device_index)
    t._state.record(t._byte_set(), True, Completion(fake, 1234, (), fake))
    return fake


def test_to_torch_inside_a_capture_does_not_poll_launches_issued_before_it(backend):
    x, xv = inputs()
    fake = _pending_write(x, FAKE_DEVICE)                          # issued before the capture's sync
    with capturing(CpuGraph(backend)):
        t = x.to_torch()                                           # waits as a host write: known done
    assert fake.polled == 0
    np.testing.assert_array_equal(t.numpy(), xv)


def test_a_wait_that_would_poll_inside_a_capture_is_refused_before_polling(backend):
    x, _ = inputs()
    fake = _pending_write(x, FAKE_DEVICE + 1)                      # a device the capture did not synchronise
    with capturing(CpuGraph(backend)):
        with pytest.raises(ts.OwnershipError) as info:
            line = here() + 1
            x.to_torch()
    assert "not allowed while capturing ts.graph()" in info.value.message and info.value.loc.line == line
    assert fake.polled == 0
    assert x._handed_at is None                                    # refused before handing anything over


def test_replay_and_nested_captures_are_refused_inside_a_capture(backend):
    x, _ = inputs()
    z = ts.zeros(N)
    first = CpuGraph(backend)
    with capturing(first):
        scale(z.partition((B,)), x, a=2.0)
    with capturing(CpuGraph(backend)):
        with pytest.raises(ts.LaunchError) as info:
            line = here() + 1
            first.replay()
        assert "g.replay() is not allowed while capturing" in info.value.message and info.value.loc.line == line
        with pytest.raises(ts.LaunchError) as info:
            line = here() + 1
            capturing(CpuGraph(backend))
        assert "cannot be nested" in info.value.message and info.value.loc.line == line
    assert first.device_replays == 0
