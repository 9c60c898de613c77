"""`tilesafe demo`: run the examples, then show what tilesafe refuses.

Each example is a complete program that checks its own result and prints a summary line;
the demo runs them in this process (one import of torch, not one per example) and prints
that line. The refusals come from `examples/refused_kernels.py`, whose cases each break one
safety rule; the demo prints the error each one gets, as a user would see it. The examples
ship inside the package (`tilesafe/examples/`), so the demo works from an installed wheel.
"""
from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
import textwrap
from pathlib import Path

from .settings import current_backend

# The order a newcomer reads them in; any other example in the folder runs after these.
ORDER = ("hello_world", "vector_add", "saxpy_2d", "ragged_sizes", "masked_fill", "softmax", "rms_norm",
         "matmul", "mixed_precision_matmul", "batched_matmul", "persistent_matmul", "flash_attention",
         "unsafe_race")
REFUSALS = "refused_kernels"


EXAMPLES = Path(__file__).resolve().parent / "examples"   # package data, present in a checkout and a wheel


def examples_dir(given: str | None) -> Path:
    """The examples folder: the one given, else the package's own."""
    return Path(given) if given else EXAMPLES


def run(given: str | None = None) -> int:
    folder = examples_dir(given)
    if not folder.is_dir():
        print(f"error: no examples folder at {folder}\n"
              "   = help: pass --examples DIR, or reinstall tilesafe (its examples ship in tilesafe/examples/)",
              file=sys.stderr)
        return 2
    print(f"tilesafe demo on the {_backend_words()}\n")
    failed = sum(not _run_example(path) for path in _example_paths(folder))
    refusals = folder / f"{REFUSALS}.py"
    if refusals.is_file():
        failed += not _show_refusals(refusals)
    print(f"\n{'all examples passed' if not failed else f'{failed} failed'}")
    return 1 if failed else 0


def _backend_words() -> str:
    name = current_backend()
    return f"{name} backend" + (" (no CUDA GPU found: a NumPy interpreter on the CPU)" if name == "reference" else "")


def _example_paths(folder: Path) -> list[Path]:
    found = {p.stem: p for p in folder.glob("*.py") if p.stem != REFUSALS and not p.stem.startswith("_")}
    first = [found.pop(name) for name in ORDER if name in found]
    return first + [found[name] for name in sorted(found)]


def _run_example(path: Path) -> bool:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(_shown(path), run_name="__main__")
    except Exception as e:   # an example's failure is reported, and the next one still runs
        first = (str(e).splitlines() or [""])[0]
        print(f"  FAIL  {path.stem}: {type(e).__name__}: {first}")
        return False
    lines = out.getvalue().strip().splitlines()
    summary = lines[-1] if lines else "ok"
    print(f"  {summary}")
    return True


def _show_refusals(path: Path) -> bool:
    print("\nWhat tilesafe refuses (each error is raised before anything runs):\n")
    module = runpy.run_path(_shown(path), run_name=REFUSALS)
    ok = True
    for n, case in enumerate(module["CASES"], 1):
        try:
            e = module["refusal"](case)
        except AssertionError as problem:
            print(f"  FAIL  {problem}")
            ok = False
            continue
        print(f"{n}. {case[0]} ({type(e).__name__})")
        print(textwrap.indent(str(e), "   ") + "\n")
    return ok


def _shown(path: Path) -> str:
    """The path as errors will show it: relative to the current folder when inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:   # another drive on Windows
        return str(path)
    return rel if not rel.startswith("..") else str(path)
