"""The host runtime fuzzer on the GPU (issue 23; run with `pytest -m gpu`): the state machine of
tests/fuzz/test_runtime_fuzz.py on CUDA tensors, where a launch returns before the GPU ran it,
so the pending-access rules (S9/S10) are under test too.

The CPU machine's rules run unchanged through its hooks, which here:
- launch on the current stream, or on one of two side streams entered through `ts.stream(s)`
  or torch's own `torch.cuda.stream(s)`, often after `torch.cuda._sleep` on that stream: the
  launch then lands milliseconds later, so a host read, host write or launch on another stream
  that tilesafe failed to order after it sees the old values (or its inputs change under it);
- make DLPack aliases through torch (`torch.from_dlpack` of the tensor or of its capsule);
- make torch's own writes (`fill_`) on any of the streams, delayed too. Torch's work is not
  tilesafe's to order (docs/runtime.md, interop): the fuzzer orders it as a user must, the
  writing stream waiting for every stream first and every stream waiting for it after.
GPU-only rules add a launch into a new output in one step (also right after the first tensor:
as separate steps, creating, partitioning and launching rarely line up, and every such step
leaves a launch in flight for the next ones to race with), CUDA graphs (an eager launch, its
capture with `ts.graph()`, replays with a delay before each) and a check of every value.

The CPU machine checks every readable handle after each step. Here that would wait for all
the work after every step and leave nothing pending for the next step to race with, so the
full check is a rule of its own (drawn like any step) and runs again at the end; each `read`
step still checks what it reads, against the model.

The budget is the fuzz profile's (fuzz_profiles.py): small by default, thousands of examples
with TILESAFE_FUZZ_PROFILE=long. Partition tiles come from a narrower set than on the CPU
(1 and 4): each tile, like each new pointer alignment, stride or extent class, is a new
Triton compile, which is what the first run spends most of its time on.
"""
import contextlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

import tilesafe as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import test_runtime_fuzz as cpu  # noqa: E402
from fuzz_profiles import fuzz_settings  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:torch modified the storage:RuntimeWarning")]

SLEEP = 5_000_000          # GPU clock cycles of torch.cuda._sleep: a few milliseconds
SIDE_STREAMS = 2


class RuntimeFuzzGPU(cpu.RuntimeFuzz):
    DEVICE = "cuda"

    def __init__(self):
        super().__init__()
        self.side = [torch.cuda.Stream() for _ in range(SIDE_STREAMS)]
        self.graphs: list = []         # kept until the end: a replay may still run when its step ends

    def _streams(self) -> list:
        return [torch.cuda.current_stream(), *self.side]

    def _stream(self, data) -> torch.cuda.Stream:
        return self._streams()[data.draw(st.integers(0, SIDE_STREAMS), label="stream (0: current)")]

    @staticmethod
    def _delay(data) -> None:
        """Maybe hold the current stream up, so the work queued next lands late."""
        if data.draw(st.booleans(), label="delay"):
            torch.cuda._sleep(SLEEP)

    # -- the CPU machine's hooks ------------------------------------------------------------------
    def _pick(self, data, n: int, label: str) -> int:
        """A launch's input from the readable handles when there are any: most launches then
        run (and race) instead of being refused, which the CPU fuzzer covers already."""
        readable = [h for h in range(n) if not self.model.check_read(h)] if label == "input" else []
        if readable:
            return data.draw(st.sampled_from(readable), label=label)
        return super()._pick(data, n, label)

    def _torch_tensor(self, values: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(values.copy()).to("cuda")    # torch's copy, on the current stream
        for s in self.side:                               # torch's work: ordered by the user
            s.wait_stream(torch.cuda.current_stream())
        return t

    @contextlib.contextmanager
    def _launch_stream(self, on_stream: bool, data):
        if not on_stream:
            self._delay(data)
            yield
            return
        s = self.side[data.draw(st.integers(0, SIDE_STREAMS - 1), label="side stream")]
        how = data.draw(st.sampled_from(("ts.stream", "torch.cuda.stream")), label="entered with")
        with ts.stream(s) if how == "ts.stream" else torch.cuda.stream(s):
            self._delay(data)
            yield

    def _host_copy(self, t: torch.Tensor) -> np.ndarray:
        return t.cpu().numpy()

    def _strict_read(self, real: ts.Tensor) -> np.ndarray:
        """Inside ts.strict_sync() a read that would wait for pending work is an OwnershipError
        raised before anything happens; the plain read after it then waits (and is checked)."""
        try:
            with ts.strict_sync():
                return real.numpy()
        except ts.OwnershipError as e:
            if "implicit wait" not in e.message:
                raise
        return real.numpy()

    def _dlpack(self, t: torch.Tensor, how: str) -> torch.Tensor:
        return torch.from_dlpack(t) if how == "torch" else torch.from_dlpack(t.__dlpack__())

    def _torch_fill(self, t: torch.Tensor, value: float, data) -> None:
        s = self._stream(data)
        for other in self._streams():
            s.wait_stream(other)       # after every earlier access, tilesafe's or torch's
        with torch.cuda.stream(s):
            self._delay(data)
            t.fill_(value)
        for other in self._streams():
            other.wait_stream(s)       # and before every later one

    # -- narrower than on the CPU: each new tile is a new compile of both kernels ------------------
    @precondition(lambda self: self.handles)
    @rule(data=st.data(), tile=st.sampled_from((1, 4)))
    def partition(self, data, tile):
        cpu.RuntimeFuzz.partition(self, data, tile)

    # -- GPU-only rules ---------------------------------------------------------------------------
    @precondition(lambda self: any(p is not None for p in self.parts))
    @rule(data=st.data(), with_input=st.booleans(), replays=st.integers(1, 2))
    def graph_replay(self, data, with_input, replays):
        """A launch run once eagerly (so it is compiled), captured with ts.graph(), replayed:
        a capture writes nothing until its replay (S12/S14); each replay is ordered like a launch."""
        p = data.draw(st.sampled_from([i for i, q in enumerate(self.parts) if q is not None]), label="partition")
        x = self._pick(data, len(self.handles), "input") if with_input else None
        if self.model.check_launch(p, x, reads_output=x is None):
            return                     # the refusals are the launch rule's
        if not self.model.handles[self.model.parts[p].handle].elems.size:
            return                     # no blocks: nothing to capture (torch warns of an empty graph)
        kernel = cpu.twice_plus_one if x is not None else cpu.plus_one
        args = (self.parts[p], self.handles[x]) if x is not None else (self.parts[p],)
        self._delay(data)
        kernel(*args)
        self.model.launch(p, x)
        with ts.graph() as g:
            kernel(*args)
        self.graphs.append(g)
        for _ in range(replays):
            self._delay(data)
            g.replay()
            self.model.launch(p, x)

    @initialize(n=st.integers(1, 12), data=st.data(), tile=st.sampled_from((1, 4)), on_stream=st.booleans())
    def first_tensor(self, n, data, tile, on_stream):
        """The CPU machine's first tensor, and a launch reading it already in flight, so that
        launches, graphs and races can start at the first step."""
        cpu.RuntimeFuzz.first_tensor(self, n)
        self.launch_into_new_output(data, n, tile, on_stream)

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), n=st.integers(1, 12), tile=st.sampled_from((1, 4)), on_stream=st.booleans())
    def launch_into_new_output(self, data, n, tile, on_stream):
        """create, partition and launch in one step, reading a readable handle: as separate
        steps they rarely line up, and here every one leaves a launch in flight for the next
        steps to race with."""
        x = self._pick(data, len(self.handles), "input")
        if self.model.check_read(x):
            return                     # nothing readable
        out = ts.zeros(n, device=self.DEVICE)
        h = self.model.new_storage(np.zeros(n, np.float32), written=True)
        self._add_handle(out, h)
        self.parts.append(out.partition((tile,)))
        p = self.model.partition(h, tile)
        assert not self.model.check_launch(p, x, reads_output=False)
        with self._launch_stream(on_stream, data):
            cpu.twice_plus_one(self.parts[p], self.handles[x])
        self.model.launch(p, x)

    @rule()
    def check_every_value(self):
        """Every readable handle shows the model's values (waits for the writers)."""
        self._check_all_values()

    def every_readable_handle_shows_the_models_values(self):
        """Not an invariant here (see the module docstring): check_every_value and teardown."""

    def teardown(self):
        """The final check, unless a step already failed (hypothesis tears down in a
        `finally`: a second failure here would hide the first)."""
        try:
            if sys.exc_info()[0] is None:
                self._check_all_values()
        finally:
            torch.cuda.synchronize()


TestRuntimeFuzzGPU = RuntimeFuzzGPU.TestCase
TestRuntimeFuzzGPU.settings = fuzz_settings(50, stateful_step_count=30)
