"""Shared fixtures: `launches` records each raw Triton launch a twin makes (kernel name, grid,
Triton options, constexprs) instead of running it; `benchmark_module` imports a script of
benchmarks/ for a smoke test."""
import importlib
import sys
from pathlib import Path

import pytest

from tilesafe.bench.twins import attention, elementwise, matmul, reductions, rows


@pytest.fixture
def launches(monkeypatch):
    seen = []
    for module in (elementwise, matmul, attention, rows, reductions):
        monkeypatch.setattr(module, "launch", lambda fn, grid, *args, options=None, **consts:
                            seen.append((fn.__name__, grid, options, consts)))
    return seen


@pytest.fixture
def benchmark_module(monkeypatch):
    """benchmark_module(name, *helpers): benchmarks/<name>.py imported; it and the helper
    modules it imports (by name) are dropped from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    names = []

    def load(name: str, *helpers: str):
        names.extend((name, *helpers))
        return importlib.import_module(name)
    yield load
    for name in names:
        sys.modules.pop(name, None)
