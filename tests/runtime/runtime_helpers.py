"""Helpers for the runtime tests: where a refused launch's error points (the marked line of the
calling test file), with the marker lookup the kernel-language tests use."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))

from lang_helpers import marker_line  # noqa: E402

__all__ = ["assert_located", "marker_line"]


def assert_located(e, path: str, marker: str) -> None:
    """The error points at the line of `path` marked `# <marker>` and renders with a help line."""
    assert e.loc is not None and e.loc.file == path and e.loc.line == marker_line(path, marker), str(e)
    assert str(e).startswith("error: ") and "= help: " in str(e)
