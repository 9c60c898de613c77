"""The package as users get it: declared Python versions, metadata, bounds, and a real wheel.

The wheel test builds tilesafe's wheel, installs it (without dependencies) into a fresh
virtual environment that borrows this environment's torch, NumPy, ml_dtypes and Triton
through a .pth file, and runs `tilesafe demo` and one example from there: what a user of
`pip install tilesafe` runs, not the checkout.
"""
import email
import inspect
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import warnings
import zipfile
from pathlib import Path

import ml_dtypes
import numpy
import pytest
import torch
import triton
from packaging.requirements import Requirement

import tilesafe as ts

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirement(name: str, group: list[str]) -> Requirement:
    return next(r for r in map(Requirement, group) if r.name == name)


def test_the_declared_python_versions_are_the_tested_ones():
    assert PYPROJECT["requires-python"] == ">=3.11"
    tested = {c.rsplit(" :: ", 1)[1] for c in PYPROJECT["classifiers"] if c.startswith("Programming Language :: "
                                                                                        "Python :: 3.")}
    assert tested == {"3.11", "3.12"}    # CI runs 3.11, the GPU machine 3.12
    assert sys.version_info >= (3, 11)


def test_kernel_parameters_have_a_valid_signature():
    """On Python 3.10 dataclasses build a docstring from the signature: a field defaulting to
    `inspect.Parameter.empty` made `import tilesafe` fail there."""
    from tilesafe.lang.signature import ParamInfo
    assert list(inspect.signature(ParamInfo).parameters) == ["name", "kind", "dtype", "shape", "default", "loc"]


def test_license_and_typed_marker():
    assert PYPROJECT["license"] == "Apache-2.0" and PYPROJECT["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert (ROOT / "src" / "tilesafe" / "py.typed").is_file()


def test_one_source_for_the_version():
    assert PYPROJECT["dynamic"] == ["version"] and "version" not in PYPROJECT
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]
    assert dynamic == {"version": {"attr": "tilesafe.__version__"}}


def test_dependency_bounds_hold_the_tested_stack():
    deps, extras = PYPROJECT["dependencies"], PYPROJECT["optional-dependencies"]
    torch_req, numpy_req = requirement("torch", deps), requirement("numpy", deps)
    for version in ("2.11.0", "2.13.0"):            # the GPU machine's and CI's torch
        assert torch_req.specifier.contains(version)
    assert not torch_req.specifier.contains("2.14.0")
    assert numpy_req.specifier.contains("1.26.4") and numpy_req.specifier.contains("2.5.0")
    triton_req = requirement("triton", extras["triton"])
    assert triton_req.specifier.contains("3.6.0") and not triton_req.specifier.contains("3.8.0")
    assert {r.name for r in map(Requirement, extras["test"])} >= {"pytest", "pytest-xdist", "hypothesis"}
    assert not {r.name for r in map(Requirement, deps)} & {"pytest", "hypothesis"}


def test_the_makefile_pins_satisfy_the_bounds():
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("DEPS :="))
    pins = {r.name: r for r in map(Requirement, (w.strip('"') for w in line.split(":=")[1].split()))}
    for name, group in (("torch", PYPROJECT["dependencies"]), ("triton", PYPROJECT["optional-dependencies"]["triton"])):
        pinned = next(iter(pins[name].specifier)).version
        assert requirement(name, group).specifier.contains(pinned), name


def test_an_untested_triton_warns_once_naming_the_tested_version(monkeypatch):
    from tilesafe.backends.triton import backend, tested_version
    tested_version.warn_if_untested.cache_clear()
    monkeypatch.setattr(triton, "__version__", "3.8.0")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            backend.TritonBackend.get("triton-interpreter")
            backend.TritonBackend.get("triton-interpreter")
    finally:
        tested_version.warn_if_untested.cache_clear()
    assert [(w.category, str(w.message)) for w in seen] == [(RuntimeWarning, (
        "tilesafe's Triton backends were tested with Triton 3.6.x, and this is Triton 3.8.0; if a launch fails "
        "inside Triton, install triton==3.6.* (pip install 'tilesafe[triton]') or use the reference backend"))]


@pytest.mark.parametrize("version", ["3.6.0", "3.6.1+git1234"])
def test_the_tested_triton_does_not_warn(version):
    from tilesafe.backends.triton import tested_version
    tested_version.warn_if_untested.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tested_version.warn_if_untested(version)
    finally:
        tested_version.warn_if_untested.cache_clear()


def test_the_wheel_installs_and_runs_the_demo_and_an_example(tmp_path):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_bytes(z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    assert {"tilesafe/py.typed", "tilesafe/examples/hello_world.py", "tilesafe/examples/refused_kernels.py",
            "tilesafe/kernels/tuned/nvidia-h200.json"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert meta["Version"] == ts.__version__ and meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", str(wheel)], check=True, timeout=300)
    _borrow_dependencies(python)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(TILESAFE_BACKEND="reference", TILESAFE_CACHE_DIR=str(tmp_path / "cache"))

    def run(*cmd):
        return subprocess.run([str(c) for c in cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    where = run(python, "-c", "import importlib.metadata as m, tilesafe; "
                              "print(tilesafe.__file__); print(tilesafe.__version__, m.version('tilesafe'))")
    assert where.returncode == 0, where.stderr
    file, versions = where.stdout.splitlines()
    assert Path(file).is_relative_to(venv), file          # the wheel's tilesafe, not the checkout's
    assert versions == f"{ts.__version__} {ts.__version__}"

    demo = run(venv / "bin" / "tilesafe", "demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stdout.startswith("tilesafe demo on the reference backend")
    assert "  hello_world: ok" in demo.stdout and "FAIL" not in demo.stdout
    assert "/site-packages/tilesafe/examples/refused_kernels.py:" in demo.stdout   # errors point at the package
    assert demo.stdout.rstrip().endswith("all examples passed")

    example = run(python, "-m", "tilesafe.examples.vector_add")
    assert example.returncode == 0, example.stderr
    assert example.stdout.splitlines()[-1].startswith("vector_add: ok, 1000 elements in 8 blocks")


def _build_wheel(tmp_path: Path) -> Path:
    """Build from a copy of the sources, so the checkout gets no build/ or egg-info."""
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(out), str(source)], check=True, timeout=300)
    (wheel,) = out.glob("tilesafe-*.whl")
    return wheel


def _borrow_dependencies(python: Path) -> None:
    """A .pth file puts the folders holding torch, NumPy, ml_dtypes and Triton on the fresh
    environment's path, after its own site-packages (so the wheel's tilesafe comes first)."""
    folders = dict.fromkeys(str(Path(m.__file__).resolve().parents[1]) for m in (torch, numpy, ml_dtypes, triton))
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert purelib != sysconfig.get_paths()["purelib"]
    (Path(purelib) / "borrowed_dependencies.pth").write_text("\n".join(folders) + "\n")
