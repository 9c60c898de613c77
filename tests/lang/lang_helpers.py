"""Helpers shared by the kernel-language tests: launching, random data, tolerances.

Oracles live in the tests themselves (NumPy / ml_dtypes); nothing here imports tilesafe
internals.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

import tilesafe as ts

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f8e4m3fn": ml_dtypes.float8_e4m3fn,
      "f8e5m2": ml_dtypes.float8_e5m2, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
      "u8": np.uint8, "bool_": np.bool_}

# Triton 3.6's interpreter computes these wrongly (DESIGN §5); tests/conftest.py skips them there.
NOT_ON_TRITON_INTERPRETER = ("bf16", "f8e4m3fn", "f8e5m2")

# (rtol, atol) per dtype, as DESIGN §2 states them.
TOL = {"f32": (1e-5, 1e-6), "tf32": (1e-3, 1e-3), "f16": (1e-2, 1e-2), "bf16": (1e-2, 1e-2)}


def launch(kernel, out: ts.Tensor, tile, *args, grid=None, **kwargs) -> np.ndarray:
    """Launch `kernel(out.partition(tile), *args)`; return the written output's values."""
    p = out.partition(tile)
    if grid is None:
        kernel(p, *args, **kwargs).sync()
    else:
        kernel.launch(p, *args, grid=grid, **kwargs).sync()
    back = p.unpartition()
    assert back is out
    return back.numpy()


def rand(rng, shape, dtype: str, lo=-3.0, hi=3.0) -> np.ndarray:
    """Random values of `dtype`, never all zeros or ones; ints in [lo, hi]."""
    if dtype == "bool_":
        return rng.random(shape) < 0.5
    if dtype in ("i8", "i16", "i32", "i64", "u8"):
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(NP[dtype])
    return rng.uniform(lo, hi, size=shape).astype(NP[dtype])


def poisoned(shape, dtype: str, value=None) -> tuple[ts.Tensor, np.ndarray]:
    """A written tensor full of a value no kernel in these tests produces, and its copy."""
    if value is None:
        value = np.nan if dtype in TOL else -12345
    host = np.full(shape, value, dtype=NP[dtype])
    return ts.tensor(host), host


def assert_close(got, want, dtype: str) -> None:
    rtol, atol = TOL[dtype]
    got64 = np.asarray(got).astype(np.float64)
    want64 = np.asarray(want).astype(np.float64)
    assert got64.shape == want64.shape
    np.testing.assert_allclose(got64, want64, rtol=rtol, atol=atol)


# --- diagnostics ------------------------------------------------------------------------------
INTERNAL_NAMES = ("tilesafe/lang", "tilesafe/runtime", "tilesafe/backends", "Builder", "Traceback", "TensorArg",
                  "MintedIndex", "Value(", "TileType", "ast.")


def marker_line(path: str, marker: str) -> int:
    """The line of `path` that carries the comment `# <marker>` (exactly one must)."""
    with open(path) as f:
        hits = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, f"marker {marker!r} found on lines {hits}"
    return hits[0]


def assert_diagnostic(e, path: str, marker: str, fragment: str) -> None:
    """A located error: message fragment, the marked line, rendering with a caret and a help line."""
    text = str(e)
    assert fragment in e.message, e.message
    assert e.loc is not None, text
    assert e.loc.file == path and e.loc.line == marker_line(path, marker), text
    assert text.startswith("error: ") and text.count("error:") == 1, text
    lines = text.splitlines()
    shown = [i for i, ln in enumerate(lines) if ln.lstrip().startswith(f"{e.loc.line} |")]
    assert shown and lines[shown[0]].rstrip().endswith(f"# {marker}"), text      # the offending source line
    caret = lines[shown[0] + 1]
    assert "^" in caret and caret.index("^") == lines[shown[0]].index("|") + 1 + e.loc.col, text
    assert "= help: " in text, text
    for name in INTERNAL_NAMES:
        assert name not in text, f"{name!r} leaks into:\n{text}"
