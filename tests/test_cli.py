"""The `tilesafe` command: --help, `demo`, and `check FILE.py` (run as a subprocess, as users do)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "src" / "tilesafe" / "examples"


def environment(**settings) -> dict:
    return dict(os.environ, TILESAFE_BACKEND="reference",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))) | settings


def tilesafe(*args, cwd=ROOT, **settings) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilesafe", *args], cwd=cwd, env=environment(**settings),
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
    assert "  --> src/tilesafe/examples/refused_kernels.py:" in out   # errors point at the example's source
    assert out.rstrip().endswith("all examples passed")


def test_demo_without_examples_says_where_to_look(tmp_path):
    result = tilesafe("demo", "--examples", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "error: no examples folder" in result.stderr


def test_check_a_good_file(tmp_path):
    path = write(tmp_path, GOOD)
    result = tilesafe("check", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == (   # the file's own prints are not shown; `add` needs B to build its body
        "checked by signature only (the body is checked at the first launch, or by `KERNEL.checks(ts.spec(...))` "
        "with values for its ts.Const parameters):\n"
        f"  add at {path}:6 needs ts.Const B\n\n"
        "ok: 2 kernels checked, 1 by signature only\n")


def test_check_counts_a_kernel_the_file_specializes_as_checked(tmp_path):
    path = write(tmp_path, GOOD + "\nadd.checks(ts.spec(100, tile=32), ts.spec(100), ts.spec(100))\n")
    result = tilesafe("check", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "ok: 2 kernels checked\n"


def test_check_finds_a_body_error_only_with_launch_facts(tmp_path):
    """A kernel needing a Const is not called clean: its body error shows once the file gives the value."""
    body_error = GOOD.replace("z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))",
                              "z.store(ts.load_tile_like(x, z).astype(ts.f16))")
    path = write(tmp_path, body_error)
    result = tilesafe("check", str(path))
    assert result.returncode == 0 and "  add at " in result.stdout and "by signature only" in result.stdout
    assert not result.stdout.startswith("ok")
    path = write(tmp_path, body_error + "\nadd.checks(ts.spec(100, tile=32), ts.spec(100), ts.spec(100))\n")
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    assert f"error: cannot store a f16 tile to `z` (f32)\n  --> {path}:8:5" in result.stdout


def test_check_a_file_that_does_not_import(tmp_path):
    path = write(tmp_path, "import tilesafe as ts\nimport not_a_module_anywhere\n" + BAD.split("\n", 2)[2])
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    out = result.stdout
    assert out.startswith(f"error: could not check {path}: ModuleNotFoundError: No module named "
                          f"'not_a_module_anywhere'\n  --> {path}:2:1\n")
    assert "   = help: kernels are checked by importing the file" in out
    assert out.count("could not check") == 2   # the diagnostic and the summary; later failures are not repeated
    assert out.rstrip().endswith("3 errors in 4 kernels checked; could not check 1 file")


def test_check_an_annotation_that_fails(tmp_path):
    path = write(tmp_path, """
        import tilesafe as ts


        @ts.kernel
        def copy(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, (NN,)], N: int):
            z.store(ts.load_tile_like(x, z))
        """)
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith(f"error: could not check {path}: NameError: name 'NN' is not defined\n"
                                    f"  --> {path}:5:1\n")
    assert result.stdout.rstrip().endswith("0 errors in 0 kernels checked; could not check 1 file")


def test_check_a_kernel_that_cannot_be_built(tmp_path):
    path = write(tmp_path, GOOD.replace("@ts.kernel\ndef scale", "@ts.kernel(preconditions=5)\ndef scale"))
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    assert f"error: could not check `scale` in {path}: TypeError: " in result.stdout
    assert f"  --> {path}:16:1\n" in result.stdout
    assert result.stdout.rstrip().endswith("0 errors in 2 kernels checked, 1 by signature only; could not check 1 kernel")


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
    result = tilesafe("check", *sorted(str(p) for p in EXAMPLES.glob("*.py")))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("ok: ")
    assert "error" not in result.stdout


@pytest.mark.parametrize("text", ["def broken(:\n", None])
def test_check_an_unreadable_file(tmp_path, text):
    path = tmp_path / "kernels.py"
    if text is not None:
        path.write_text(text)
    result = tilesafe("check", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith(f"error: cannot read {path}")


def test_a_bad_setting_does_not_stop_version_or_help():
    for args in (["--version"], ["--help"]):
        result = tilesafe(*args, TILESAFE_BACKEND="bogus")
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""


def test_a_bad_setting_is_an_error_with_help_where_it_is_needed():
    result = tilesafe("demo", TILESAFE_BACKEND="bogus")
    assert result.returncode == 2
    assert result.stderr == ("error: the environment variable TILESAFE_BACKEND='bogus' is not a backend\n"
                             "   = help: set it to one of reference, triton, triton-interpreter, or unset it to "
                             "choose by the machine\n")


def test_output_to_a_closed_pipe_ends_quietly():
    """`tilesafe bench --list | head -1`: the reader is gone before the command writes."""
    proc = subprocess.Popen([sys.executable, "-m", "tilesafe", "bench", "--list"], cwd=ROOT, env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 1
    assert err == ""
