"""Shared fixtures: the CPU backends every kernel test runs on, and counts of full-path launches
and of compiled specializations.

`backend` runs a test's launches on the reference interpreter and, once the Triton backend
imports, on Triton's interpreter too. Triton 3.6's interpreter computes bf16 wrongly and
mis-casts fp8 (DESIGN §5), so there a test whose `dtype` parameter is bf16 or fp8, or that
is marked `reference_only`, is skipped.
"""
import collections

import pytest
import torch

import tilesafe as ts
from tilesafe.runtime import binding, future


def _cpu_backends() -> list[str]:
    names = ["reference"]
    try:
        import tilesafe.backends.triton.backend  # noqa: F401
    except Exception:   # not built yet, or Triton missing: reference only
        return names
    return names + ["triton-interpreter"]


CPU_BACKENDS = _cpu_backends()
NOT_ON_TRITON_INTERPRETER = ("bf16", "f8e4m3fn", "f8e5m2")


def pytest_configure(config):
    config.addinivalue_line("markers", "reference_only: runs on the reference backend only")


@pytest.fixture(autouse=True)
def own_holding(monkeypatch):
    """Each CPU test holds its launches' completions in a deque of its own: the CPU stand-ins of
    the GPU launch forms leave completions on stand-in streams in `future.HOLDING`, and a later
    test's launch that reached the sweep count would record a CUDA event for them (no CUDA here),
    so whether a test failed depended on how many stand-in launches ran before it in its worker."""
    if not torch.cuda.is_available():
        monkeypatch.setattr(future.HOLDING, "_held", collections.deque())
        monkeypatch.setattr(future.HOLDING, "_next", future.HOLDING.limit)


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    name = request.param
    if name != "reference":
        params = getattr(getattr(request.node, "callspec", None), "params", {})
        dtype = params.get("dtype")
        dtype = getattr(dtype, "name", dtype)
        if request.node.get_closest_marker("reference_only") or dtype in NOT_ON_TRITON_INTERPRETER:
            pytest.skip(f"not run on {name}")
    with ts.backend(name):
        yield name


@pytest.fixture
def binds(monkeypatch):
    """How many launches took the full path (binding runs only there; the launch cache skips it)."""
    count = [0]
    real = binding.bind

    def counting(*a, **k):
        count[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(binding, "bind", counting)
    return count


@pytest.fixture
def compiles(monkeypatch):
    """compiles() -> how many new specializations (code for a new layout) were made so far."""
    from tilesafe.runtime.specialize import Specializer
    count = [0]
    real = Specializer.compiled

    def counting(self, bound, backend, schedule=None):
        before = len(self.code)
        code = real(self, bound, backend, schedule)
        count[0] += len(self.code) - before
        return code
    monkeypatch.setattr(Specializer, "compiled", counting)
    return lambda: count[0]
