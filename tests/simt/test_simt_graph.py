"""SIMT launches inside `ts.graph()` (S12), on this CPU: the graph is the real `Graph` with its
device hooks replaced by stand-ins (as tests/runtime/test_graph_capture.py does) and the GPU
launch stubbed (test_simt_gpu_repeat.py's `device` fixture), so what is tested is what the
capture records, marks and refuses. tests/gpu/test_simt_gpu.py captures and replays on the GPU."""
import contextlib

import pytest
import torch
from test_simt_gpu_repeat import device  # noqa: F401  (the fixture)

import tilesafe as ts
from tilesafe import simt
from tilesafe.runtime.future import Completion
from tilesafe.runtime.graph import Graph, capturing
from tilesafe.simt.examples.histogram import histogram
from tilesafe.simt.examples.vector_add import vector_add


class StandInGraph(Graph):
    def __init__(self, on_stream=True):
        super().__init__()
        self.on_stream = on_stream
        self.replays = 0

    @contextlib.contextmanager
    def _capture_on_device(self):
        yield

    def _on_capture_stream(self) -> bool:
        return self.on_stream

    def _on_capture_device(self, device) -> bool:
        return True

    def _replay_on_device(self) -> Completion:
        self.replays += 1
        return Completion()


def test_a_captured_launch_is_recorded_and_its_outputs_count_as_written_from_the_first_replay(device):
    x, y = torch.ones(64), torch.ones(64)
    mid, out = ts.empty(64), ts.empty(64)
    vector_add(mid, x, y)                       # the warm-up launches: compile, plan
    vector_add(out, mid, y)
    for t in (mid, out):                        # as if freshly allocated again
        t._state.init_mask = torch.zeros(t._state.nbytes, dtype=torch.bool)
    g = StandInGraph()
    with capturing(g):
        vector_add(mid, x, y)
        vector_add(out, mid, y)                 # reads what the captured launch before it writes
    assert len(device.launched) == 4            # two warm-ups, two captured
    assert mid._state.init_mask is not None     # nothing ran yet: not written
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        out.numpy()
    g.replay()
    assert mid._state.init_mask is None and out._state.init_mask is None
    assert {(a._torch().data_ptr(), w) for a, w in g._accesses} == {
        (mid._torch().data_ptr(), True), (x.data_ptr(), False), (y.data_ptr(), False),
        (out._torch().data_ptr(), True), (mid._torch().data_ptr(), False)}


def test_a_capture_needs_an_eager_launch_of_the_layout_first(device):
    out = torch.empty(64)
    with pytest.raises(ts.LaunchError, match="`vector_add` has not been launched on the GPU with this layout "
                                             "before the capture"):
        with capturing(StandInGraph()):
            vector_add(out, torch.ones(64), torch.ones(64))
    assert device.launched == []


def test_a_kernel_with_run_time_checks_is_refused_in_a_capture(device):
    hist, data = torch.zeros(4, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    histogram.launch(hist, data, grid=(1,))
    line = histogram.src.loc(histogram.info.atomics[0]).line
    with pytest.raises(ts.LaunchError, match=f"`histogram` has run-time checks \\(checked at line {line}\\), "
                                             "which ts.graph\\(\\) cannot report"):
        with capturing(StandInGraph()):
            histogram.launch(hist, data, grid=(1,))
    assert len(device.launched) == 1


def test_a_launch_on_another_stream_than_the_capture_is_refused(device):
    x, y, out = torch.ones(64), torch.ones(64), torch.empty(64)
    vector_add(out, x, y)
    with pytest.raises(ts.LaunchError, match="launched on another stream than the one ts.graph\\(\\) captures"):
        with capturing(StandInGraph(on_stream=False)):
            vector_add(out, x, y)


@simt.kernel(contract=simt.Contract(block=(64,)), unsafe=True)
def unguarded(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    out[simt.global_id()] = 1.0                 # the ragged last block writes past the end: checked


def test_an_unsafe_write_is_a_run_time_check_whose_flag_sync_reads(device, monkeypatch):
    assert unguarded.has_checks                 # was False: a kernel whose only checks were unsafe writes
    flag = torch.zeros(1, dtype=torch.int32)
    monkeypatch.setattr(unguarded, "gpu_compiled", lambda bound, index: "compiled", raising=False)
    monkeypatch.setattr(unguarded, "error_flag", lambda index: flag, raising=False)
    f = unguarded.unsafe_launch(torch.empty(100), grid=(2,))
    flag[0] = 7                                 # as the GPU's __st sets it: the kernel line of the bad write
    with pytest.raises(ts.SanitizerError, match="a bounds check in `unguarded` failed on the GPU"):
        f.sync()


def test_a_captured_launch_of_a_known_layout_passes_its_own_tensors(device):
    x, y = torch.ones(64), torch.ones(64)
    vector_add(torch.empty(64), x, y)           # the warm-up: the layout's plan, with other memory
    out, x2 = torch.empty(64), torch.full((64,), 2.0)
    with capturing(StandInGraph()):
        vector_add(out, x2, y)
    _, _, values = device.launched[-1]          # the parameters as the capture recorded them
    assert (values[4], values[11], values[18]) == (out.data_ptr(), x2.data_ptr(), y.data_ptr())
