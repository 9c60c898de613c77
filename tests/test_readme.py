"""The README's examples run, and the output it shows is the output they print.

The first python block is the tour's vector add; the second inspects it. Each is followed by
a text block with what it prints. The error block is the real error of examples/refused_kernels.py.
The tour's `add` ties `z`'s length to `x`'s, so a mismatch is refused as PyTorch users expect.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", README, flags=re.S | re.M)


def run_python(code: str, tmp_path: Path, cwd: Path) -> str:
    script = tmp_path / "readme_example.py"
    script.write_text(code)
    env = dict(os.environ, TILESAFE_BACKEND="reference",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_first_python_block_is_the_vector_add_tour(tmp_path):
    first = blocks("python")[0]
    assert "def add(z: ts.Mut[ts.f32, (\"B\",)]" in first
    out = run_python(first, tmp_path, tmp_path)
    assert out == blocks("text")[0]


def test_the_inspection_block_prints_what_the_readme_shows(tmp_path):
    first, inspect = blocks("python")[:2]
    out = run_python(first + inspect, tmp_path, tmp_path)
    assert out == blocks("text")[0] + blocks("text")[2]


def test_the_error_block_is_a_real_error(tmp_path):
    code = ("import runpy\n"
            "m = runpy.run_path('src/tilesafe/examples/refused_kernels.py', run_name='refused_kernels')\n"
            "print(m['refusal'](m['CASES'][0]))\n")
    out = run_python(code, tmp_path, ROOT)
    assert out == blocks("text")[1]


def test_the_tour_add_refuses_a_z_longer_than_x(tmp_path):
    """A z of 1000 with an x and y of 500 is a LaunchError naming the precondition, and z stays unwritten."""
    first = blocks("python")[0]
    kernel = first[:first.index("rng = ")]   # the imports and the kernel, not the tour's launch
    code = kernel + (
        "z = ts.empty(1000)\n"
        "half = ts.tensor(np.ones(500, np.float32))\n"
        "try:\n"
        "    add(z.partition((128,)), half, half)\n"
        "except ts.LaunchError as e:\n"
        "    print(type(e).__name__, e.message)\n"
        "    print(e.loc.line)\n")
    out = run_python(code, tmp_path, tmp_path)
    assert out.splitlines() == [
        "LaunchError precondition `dim(z, 0) == dim(x, 0)` of `add` does not hold (dim(z, 0) = 1000, dim(x, 0) = 500)",
        str(kernel.count("\n") + 4)]   # the line of the launch


def test_the_two_commands_are_make_targets():
    assert "make demo" in README and "make test" in README
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_torch_block_runs_and_prints_true(tmp_path):
    (block,) = [b for b in blocks("python") if "torch.ops.tilesafe" in b]
    assert run_python(block, tmp_path, tmp_path).strip() == "True"
