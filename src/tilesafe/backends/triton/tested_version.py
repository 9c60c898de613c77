"""The Triton version the adapter was tested on, and one warning for any other.

`adapter.py` relies on Triton internals (the interpreter switch, the launch fast path), so a
Triton outside the tested series may fail in ways unrelated to the user's kernel. That is
worth saying once per process, before the first Triton launch, and naming what was tested;
pyproject.toml's `triton` extra pins the same series.
"""
from __future__ import annotations

import functools
import warnings

TESTED = "3.6"   # the major.minor series the adapter was tested with


@functools.lru_cache(maxsize=None)   # once per process and version
def warn_if_untested(version: str) -> None:
    if version.split("+")[0].split(".")[:2] != TESTED.split("."):
        warnings.warn(f"tilesafe's Triton backends were tested with Triton {TESTED}.x, and this is Triton "
                      f"{version}; if a launch fails inside Triton, install triton=={TESTED}.* (pip install "
                      f"'tilesafe[triton]') or use the reference backend", RuntimeWarning, stacklevel=2)
