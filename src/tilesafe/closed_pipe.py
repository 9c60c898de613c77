"""Command-line output to a closed pipe (`tilesafe bench --list | head -1`) ends quietly.

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises BrokenPipeError
wherever the program happens to be printing. The commands run inside `exits_quietly()`,
which follows the recipe of Python's `signal` documentation: stop, point stdout at devnull
(so the interpreter's own flush at exit does not fail again) and exit with status 1.
"""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def exits_quietly():
    try:
        yield
        sys.stdout.flush()   # output still buffered fails here, inside the guard, not at exit
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None
