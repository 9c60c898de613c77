"""Every example runs as a program (`python examples/NAME.py`), passes its own check and says so.

Each example checks its result against NumPy computed in the script and prints
`NAME: ok, ...` as its last line; a failed check raises, so the exit status says it all.
They run as subprocesses on each CPU backend (TILESAFE_BACKEND), and on Triton under `-m gpu`.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXPECTED = ["hello_world", "vector_add", "saxpy_2d", "matmul", "persistent_matmul", "batched_matmul",
            "mixed_precision_matmul", "softmax", "rms_norm", "masked_fill", "flash_attention", "ragged_sizes",
            "unsafe_race", "refused_kernels"]
BF16 = {"mixed_precision_matmul"}   # Triton 3.6's interpreter computes bf16 wrongly (DESIGN §5)


def run_example(name: str, backend: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TILESAFE_BACKEND=backend,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_passed(name: str, result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    lines = result.stdout.strip().splitlines()
    assert lines and lines[-1].startswith(f"{name}: ok"), result.stdout
    assert "Traceback" not in result.stderr


def test_every_example_is_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.reference_only) if n in BF16 else n
                                  for n in EXPECTED])
def test_example(name, backend):
    assert_passed(name, run_example(name, backend))


@pytest.mark.gpu
@pytest.mark.parametrize("name", EXPECTED)
def test_example_on_triton(name):
    assert_passed(name, run_example(name, "triton"))


def test_examples_have_a_docstring_and_a_main():
    for name in EXPECTED:
        text = (EXAMPLES / f"{name}.py").read_text()
        assert text.startswith('"""'), name
        assert 'if __name__ == "__main__":\n    main()' in text, name


def test_unsafe_race_names_the_blocks_and_the_line():
    out = run_example("unsafe_race", "reference").stdout
    assert "error: race on `total` at element 0: block (1,) writes it and block (0,) also writes it" in out
    line = next(i for i, text in enumerate((EXAMPLES / "unsafe_race.py").read_text().splitlines(), 1)
                if "ts.store_ptr(total" in text)
    assert f"examples/unsafe_race.py:{line}:5" in out
