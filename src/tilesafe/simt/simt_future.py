"""A SIMT launch's future: the runtime's future plus the GPU's bounds-check flag, read at sync."""
from __future__ import annotations

from ..errors import Loc, SanitizerError
from . import write_masks
from .lower_numba import UNINITIALISED


class SimtFuture:
    """A SIMT launch in flight: `sync()` waits, marks what an unsafe kernel wrote at computed indices
    as written (S14, from the launch's write masks), reports a failed run-time check, returns the outputs."""
    __slots__ = ("_future", "_kernel", "_err", "_marks")

    def __init__(self, future, kernel, err, marks=()):
        self._future, self._kernel, self._err, self._marks = future, kernel, err, marks

    def done(self) -> bool:
        return self._future.done()

    def wait(self) -> None:
        self._future.wait()
        self._check()

    def sync(self):
        """Wait for the launch; raise SanitizerError if a bounds check failed; return the outputs."""
        self._future.sync()
        self._check()
        return self._future.results()

    def results(self):
        return self._future.results()

    def _check(self) -> None:
        if self._marks:       # the launch is done: the elements its unsafe writes reached are written
            marks, self._marks = self._marks, ()
            write_masks.mark(marks)
        if self._err is None:
            return
        code, line = divmod(int(self._err.item()), UNINITIALISED)
        if code:
            self._err.zero_()
            raise SanitizerError(f"a read of shared memory nobody wrote in `{self._kernel.name}` on the GPU (the "
                                 "sanitizer's shadow bits): its results are not valid",
                                 Loc(self._kernel.src.file, line),
                                 help="read only elements some thread's permit wrote before the barrier") from None
        if line:
            self._err.zero_()
            raise SanitizerError(f"a bounds check in `{self._kernel.name}` failed on the GPU: the kernel read "
                                 "outside a tensor there, so its results are not valid",
                                 Loc(self._kernel.src.file, line),
                                 help="use x.get(i, default) where an index may fall outside") from None

    def __await__(self):
        result = yield from self._future.__await__()
        self._check()
        return result
