"""Helpers for the runtime tests: where a refused launch's error points (the marked line of the
calling test file), with the marker lookup the kernel-language tests use; a stand-in for the
current CUDA stream, so the GPU fast launches run on the CPU."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))

from lang_helpers import marker_line  # noqa: E402

__all__ = ["Stream", "assert_located", "marker_line", "on_stream_7"]


def assert_located(e, path: str, marker: str) -> None:
    """The error points at the line of `path` marked `# <marker>` and renders with a help line."""
    assert e.loc is not None and e.loc.file == path and e.loc.line == marker_line(path, marker), str(e)
    assert str(e).startswith("error: ") and "= help: " in str(e)


class Stream:
    """A stand-in torch stream: nothing ever polls it here (the completions are finished by hand)."""
    device_index = None


def on_stream_7(monkeypatch) -> None:
    """The current CUDA stream is raw stream 7, whose torch object is a fresh `Stream`."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
