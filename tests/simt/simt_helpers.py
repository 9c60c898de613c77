"""Helpers for the SIMT tests: the located-diagnostic assertion the kernel-language tests use, and
a stand-in for CUDA events of stubbed device work."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))

from lang_helpers import assert_diagnostic, marker_line  # noqa: E402

__all__ = ["assert_diagnostic", "marker_line", "StubEvent", "PendingEvent"]


class StubEvent:
    """A CUDA event of stubbed device work: done (`query()`), unless a subclass says otherwise."""
    done = True

    def record(self, stream=None):
        pass

    def query(self):
        return self.done

    def synchronize(self):
        pass


class PendingEvent(StubEvent):
    """A CUDA event of stubbed device work still running."""
    done = False
