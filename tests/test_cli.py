"""The `tilesafe` command: --help, `demo`, and `check FILE.py` (run as a subprocess, as users do)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tilesafe(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, TILESAFE_BACKEND="reference",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "tilesafe", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def write(tmp_path: Path, text: str, name="kernels.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


GOOD = '''
import numpy as np
import tilesafe as ts


@ts.kernel
def add(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)],
        B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


z = ts.empty(100)
out = add(z.partition((32,)), ts.tensor(np.ones(100, np.float32)), ts.tensor(np.ones(100, np.float32))).sync()
print("this launch is refused under check", out)


@ts.kernel
def scale(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], a: float, N: int):
    z.store(a * ts.load_tile_like(x, z))


if __name__ == "__main__":
    raise SystemExit("check must not run the main block")
'''

BAD = '''
import tilesafe as ts


@ts.kernel
def writes_input(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    x.store(ts.load_tile_like(x, z))


@ts.kernel
def fine(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    z.store(ts.load_tile_like(x, z))


if True:
    @ts.kernel
    def odd_tile(z: ts.Mut[ts.f32, (100,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        z.store(ts.load_tile_like(x, z))

    @ts.kernel
    def wrong_dtype(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        z.store(ts.load_tile_like(x, z).astype(ts.f16))
'''


def test_help():
    result = tilesafe("--help")
    assert result.returncode == 0
    assert "usage: tilesafe" in result.stdout
    assert "demo" in result.stdout and "check" in result.stdout


def test_no_command_prints_help_and_fails():
    result = tilesafe()
    assert result.returncode == 2
    assert "usage: tilesafe" in result.stdout


def test_demo_runs_every_example_and_shows_the_refusals():
    result = tilesafe("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "reference backend" in out
    for name in ("hello_world", "vector_add", "matmul", "flash_attention", "unsafe_race"):
        assert f"  {name}: ok" in out
    assert "FAIL" not in out
    for expected in ("cannot store to `x`: it is a read-only input (ts.Ref)",
                     "can only be indexed by an index minted by",
                     "shares memory with argument",
                     "this tensor is lent to a partition",
                     "came from ts.empty and has not been written",
                     "which is not a power of two"):
        assert expected in out
    assert "  --> examples/refused_kernels.py:" in out   # errors point at the example's source
    assert out.rstrip().endswith("all examples passed")


def test_demo_without_examples_says_where_to_look(tmp_path):
    result = tilesafe("demo", "--examples", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "error: no examples folder" in result.stderr


def test_check_a_good_file(tmp_path):
    path = write(tmp_path, GOOD)
    result = tilesafe("check", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "ok: 2 kernels checked\n"   # the file's own prints are not shown


def test_check_reports_every_bad_kernel(tmp_path):
    path = write(tmp_path, BAD)
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    out = result.stdout
    assert out.count("error: ") == 3
    assert f"error: cannot store to `x`: it is a read-only input (ts.Ref)\n  --> {path}:6:5" in out
    assert f"error: the tile of `z` has 100, which is not a power of two\n  --> {path}:16:18" in out
    assert f"error: cannot store a f16 tile to `z` (f32)\n  --> {path}:21:9" in out
    assert out.rstrip().endswith("3 errors in 4 kernels checked")
    assert "Traceback" not in out + result.stderr


def test_check_keeps_future_annotations(tmp_path):
    path = write(tmp_path, "from __future__ import annotations\n" + GOOD)
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    assert "the annotation of `z` is a string" in result.stdout


def test_check_every_example_is_clean():
    result = tilesafe("check", *sorted(str(p) for p in (ROOT / "examples").glob("*.py")))
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith("ok: ")


@pytest.mark.parametrize("text", ["def broken(:\n", None])
def test_check_an_unreadable_file(tmp_path, text):
    path = tmp_path / "kernels.py"
    if text is not None:
        path.write_text(text)
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith(f"error: cannot read {path}")
