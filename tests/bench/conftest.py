"""Shared fixture of the twin tests: `launches` records each raw Triton launch a twin makes
(kernel name, grid, Triton options, constexprs) instead of running it."""
import pytest

from tilesafe.bench.twins import attention, elementwise, matmul, reductions, rows


@pytest.fixture
def launches(monkeypatch):
    seen = []
    for module in (elementwise, matmul, attention, rows, reductions):
        monkeypatch.setattr(module, "launch", lambda fn, grid, *args, options=None, **consts:
                            seen.append((fn.__name__, grid, options, consts)))
    return seen
