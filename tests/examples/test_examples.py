"""Every example runs, passes its own check against NumPy and says so.

Each example checks its result against NumPy computed in the script and prints
`NAME: ok, ...` as its last line; a failed check raises. They run in this process through
runpy (as `python src/tilesafe/examples/NAME.py` would run them) on each CPU backend, and on Triton
under `-m gpu`; one runs as a real subprocess, and `tilesafe demo` (tests/test_cli.py)
runs them all from the command line.
"""
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import tilesafe as ts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "src" / "tilesafe" / "examples"   # package data: they ship in the wheel
EXPECTED = ["hello_world", "vector_add", "saxpy_2d", "matmul", "persistent_matmul", "batched_matmul",
            "mixed_precision_matmul", "softmax", "rms_norm", "masked_fill", "flash_attention", "ragged_sizes",
            "unsafe_race", "refused_kernels"]
BF16 = {"mixed_precision_matmul"}
TMA_EXAMPLES = {"matmul", "persistent_matmul", "saxpy_2d", "softmax"}   # aligned 2-D tensors in their demo   # Triton 3.6's interpreter computes bf16 wrongly (DESIGN §5)


def run_example(name: str, capsys) -> str:
    runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    return capsys.readouterr().out


def assert_passed(name: str, out: str) -> None:
    lines = out.strip().splitlines()
    assert lines and lines[-1].startswith(f"{name}: ok"), out


def test_every_example_is_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.reference_only) if n in BF16 else n
                                  for n in EXPECTED])
def test_example(name, backend, capsys):
    assert_passed(name, run_example(name, capsys))


@pytest.mark.parametrize("name", [n for n in EXPECTED if n not in BF16])
def test_example_through_tma_descriptors_on_the_interpreter(name, capsys, monkeypatch):
    """Every example with every eligible 2-D access through TMA descriptors (as on a Hopper
    GPU for tile products), under Triton's interpreter."""
    from tilesafe.backends.triton import codegen
    from tilesafe.backends.triton.backend import TritonBackend
    monkeypatch.setattr(TritonBackend.get("triton-interpreter"), "descriptors", True)
    used, generate = [], codegen.generate
    monkeypatch.setattr(codegen, "generate", lambda *a, **k: (lambda g: (used.append(g.descriptors), g)[1])(
        generate(*a, **k)))
    with ts.backend("triton-interpreter"):
        assert_passed(name, run_example(name, capsys))
    if name in TMA_EXAMPLES:                 # their aligned 2-D tensors really went through TMA
        assert any(used), used


@pytest.mark.gpu
@pytest.mark.parametrize("name", EXPECTED)
def test_example_on_triton(name, capsys):
    with ts.backend("triton"):
        assert_passed(name, run_example(name, capsys))


def test_an_example_runs_as_a_program():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "src/tilesafe/examples/hello_world.py"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("hello_world: ok")


def test_examples_have_a_docstring_and_a_main():
    for name in EXPECTED:
        text = (EXAMPLES / f"{name}.py").read_text()
        assert text.startswith('"""'), name
        assert 'if __name__ == "__main__":\n    main()' in text, name


def test_unsafe_race_names_the_blocks_and_the_line(capsys):
    with ts.backend("reference"):
        out = run_example("unsafe_race", capsys)
    assert "error: race on `total` at element 0: block (1,) writes it and block (0,) also writes it" in out
    line = next(i for i, text in enumerate((EXAMPLES / "unsafe_race.py").read_text().splitlines(), 1)
                if "ts.store_ptr(total" in text)
    assert f"unsafe_race.py:{line}:5" in out


def test_examples_under_the_sanitizer():
    """With TILESAFE_SANITIZE=1 every safe kernel of every example runs sanitized too: no
    race, and no access the bounds proof left unmasked goes outside its tensor."""
    runner = "import runpy, sys\nfor path in sys.argv[1:]:\n    runpy.run_path(path, run_name='__main__')\n"
    paths = [str(EXAMPLES / f"{n}.py") for n in EXPECTED]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TILESAFE_SANITIZE="1", TILESAFE_BACKEND="reference")
    run = subprocess.run([sys.executable, "-c", runner, *paths], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in EXPECTED:
        assert f"{name}: ok" in run.stdout, name
