"""Helpers for the SIMT tests: the located-diagnostic assertion the kernel-language tests use."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))

from lang_helpers import assert_diagnostic, marker_line  # noqa: E402

__all__ = ["assert_diagnostic", "marker_line"]
