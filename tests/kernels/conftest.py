"""Backends for the kernel-library tests.

Each test runs on the reference interpreter, on Triton's CPU interpreter (fp32/fp16 only:
Triton 3.6's interpreter computes bf16 wrongly, DESIGN §5), and, under `-m gpu`, through
Triton on a CUDA GPU. Tensors live where the backend runs: the CPU, or CUDA for `triton`.
On Triton's interpreter every eligible 2-D access goes through TMA descriptors (the
language tests cover the pointer path there), so CI runs the library's TMA code too.
"""
import sys

import pytest
import torch

import tilesafe as ts
from tilesafe.kernels import call_hits, call_plans, configs
from tilesafe.runtime import future, planned_launch
from tilesafe.runtime.planned_launch import PlannedLaunch


def _interpreter_works() -> bool:
    try:
        import tilesafe.backends.triton.backend  # noqa: F401
    except Exception:
        return False
    return True


BACKENDS = [
    "reference",
    pytest.param("triton-interpreter", marks=[] if _interpreter_works() else pytest.mark.xfail(
        reason="tilesafe.backends.triton.backend does not import", strict=False)),
    pytest.param("triton", marks=pytest.mark.gpu),
]
NOT_ON_INTERPRETER = ("bf16",)


@pytest.fixture(params=BACKENDS)
def backend(request):
    name = request.param
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if name == "triton-interpreter" and (params.get("dtype") in NOT_ON_INTERPRETER
                                         or request.node.get_closest_marker("reference_only")):
        pytest.skip("Triton's interpreter computes bf16 wrongly (DESIGN §5)")
    if name == "triton" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if name == "triton-interpreter":
        from tilesafe.backends.triton.backend import TritonBackend
        interp = TritonBackend.get(name)
        saved, interp.descriptors = interp.descriptors, True
        try:
            with ts.backend(name):
                yield name
        finally:
            interp.descriptors = saved
        return
    with ts.backend(name):
        yield name


@pytest.fixture
def device(backend):
    return "cuda" if backend == "triton" else "cpu"


@pytest.fixture
def counted(monkeypatch):
    """[borrows by from_torch on a call-plan hit, launches the fast form started] (call_hits)."""
    count = [0, 0]
    real_borrow, real_run = call_hits.from_torch, PlannedLaunch.run

    def borrow(t):
        count[0] += 1
        return real_borrow(t)

    def run(self, roots):
        done = real_run(self, roots)
        count[1] += done
        return done
    monkeypatch.setattr(call_hits, "from_torch", borrow)
    monkeypatch.setattr(PlannedLaunch, "run", run)
    return count


@pytest.fixture
def no_sweeps(monkeypatch):
    """A sweep of the held completions (future.HOLDING) records a CUDA event for the newest one
    per stream, which a stand-in stream cannot: none while the stand-ins run, whose completions
    the tests finish by hand (else whether one sweeps depends on how many launches came before)."""
    monkeypatch.setattr(future.HOLDING, "_next", float("inf"))


@pytest.fixture
def gpu_form_launching_nothing(monkeypatch, no_sweeps):
    """Every fast launch of a call plan takes the GPU form (on CPU tensors) with a start that
    launches nothing."""
    def prepare(self, bound):
        self.start, self.values = (lambda stream, args: None), (None,) * len(self.access)
        self.pointers = tuple((k, k) for k in range(len(self.access)))
        self.descriptors, self.device_index = (), 0
        return planned_launch._GPU
    monkeypatch.setattr(PlannedLaunch, "_prepare", prepare)


class StandInStream:
    """A stand-in torch stream (nothing polls it: the completions are finished by hand)."""
    device_index = None


@pytest.fixture
def stand_in_stream(monkeypatch):
    """The current CUDA stream is raw handle 7 and `torch.cuda.current_stream()` a StandInStream."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: StandInStream())


@pytest.fixture
def gpu_form_recording(monkeypatch, no_sweeps, stand_in_stream):
    """A factory: `gpu_form_recording(layout=None)` makes every fast launch take the GPU form on
    CPU tensors — argument k's address at position k of the argument tuple, then the values and
    descriptors `layout(n)` gives for n arguments (default: the addresses alone) — with a start
    that records (stream, args) and launches nothing. Returns (started, ran): the starts, and
    what each run of a plan returned."""
    def install(layout=None):
        started, ran = [], []

        def prepare(self, bound):
            n = len(self.access)
            self.start = lambda stream, args: started.append((stream, args))
            self.values, self.descriptors = layout(n) if layout else ((None,) * n, ())
            self.pointers = tuple((k, k) for k in range(n))
            self.device_index = 0
            return planned_launch._GPU
        real_run = PlannedLaunch.run
        monkeypatch.setattr(PlannedLaunch, "_prepare", prepare)
        monkeypatch.setattr(PlannedLaunch, "run", lambda self, roots: ran.append(real_run(self, roots)) or ran[-1])
        return started, ran
    return install


# The kernel of `linear` and of the fused decode GEMV call that streams the weight the same way.
FUSED_PARTNER = {"skinny_kernel": "fused_skinny_kernel", "split_k_kernel": "fused_split_kernel",
                 "split_sum_kernel": "fused_sum_kernel"}


@pytest.fixture
def gemv_launches(monkeypatch):
    """Each launch of `linear` and the fused GEMV calls on the Triton backend, recorded and not
    run (no call plans), as (kernel — linear's under its fused partner's name —, output tiles,
    resolved config, the loop's constants BK/PER/DOT/PREFETCH)."""
    seen = []

    def record(kernel, outputs, grid=None, cfg=None, pdl=False, **args):
        loop = {k: args[k] for k in ("BK", "PER", "DOT", "PREFETCH") if k in args}
        seen.append((FUSED_PARTNER.get(kernel.name, kernel.name), {n: t for n, (_, t) in outputs.items()},
                     dict(cfg or {}), loop))
    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    monkeypatch.setattr(call_plans, "call_key", lambda *a: (None, None))
    for name in ("matmul", "linear_fusions"):
        monkeypatch.setattr(sys.modules[f"tilesafe.kernels.{name}"], "launch", record)
    return seen
