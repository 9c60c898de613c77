"""TILESAFE_DUMP=1 prints each new specialization's IR (and Triton source) to stderr."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PROGRAM = textwrap.dedent("""
    import numpy as np
    import tilesafe as ts

    @ts.kernel
    def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
        z.store(ts.load_tile_like(x, z) * 2.0)

    x = ts.tensor(np.arange(100, dtype=np.float32) + 0.5)
    with ts.backend(BACKEND):
        out = double(ts.empty(100).partition((32,)), x).sync().unpartition()
        double(ts.empty(100).partition((32,)), x).sync()   # same specialization: no second dump
    assert np.array_equal(out.numpy(), x.numpy() * 2)
""")


def _run(tmp_path, program: str, env):
    script = tmp_path / "program.py"      # kernels need a source file
    script.write_text(program)
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("backend, source", [("reference", False), ("triton-interpreter", True)])
def test_dump_prints_ir_and_source_once(tmp_path, backend, source):
    env = dict(os.environ, PYTHONPATH=str(SRC), TILESAFE_DUMP="1", TILESAFE_CACHE_DIR=str(tmp_path))
    run = _run(tmp_path, PROGRAM.replace("BACKEND", repr(backend)), env)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("=== tilesafe: IR of double ===") == 1
    assert "func @double(" in run.stderr and "store(%z" in run.stderr
    assert ("=== tilesafe: Triton source of double ===" in run.stderr) == source
    if source:
        assert "@triton.jit" in run.stderr


def test_no_dump_by_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TILESAFE_DUMP"}
    env.update(PYTHONPATH=str(SRC), TILESAFE_CACHE_DIR=str(tmp_path))
    run = _run(tmp_path, PROGRAM.replace("BACKEND", "'reference'"), env)
    assert run.returncode == 0, run.stderr
    assert "tilesafe: IR" not in run.stderr
