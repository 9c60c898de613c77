"""The error classes users see, and how a located diagnostic is rendered.

Every error a user can cause is a `TileSafeError`. Errors about a kernel's code carry a
`Loc` and render like a compiler diagnostic: one `error:` line, the file and line, the
source with a caret, and a hint that says what to do next.
"""
from __future__ import annotations

import linecache
import weakref
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Loc:
    """A place in the user's source: 1-based line, 1-based column, caret width."""
    file: str
    line: int
    col: int = 1
    width: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class TileSafeError(Exception):
    """Base of every error tilesafe reports."""

    def __init__(self, message: str, loc: Loc | None = None, help: str | None = None):
        self.message = message
        self.loc = loc
        self.help = help
        super().__init__(render(message, loc, help))


class KernelError(TileSafeError):
    """A kernel's code breaks a rule (raised at definition or first specialization)."""


class CompileError(KernelError):
    """The backend's compiler failed on a kernel tilesafe accepted: a compiler bug, reported
    at the kernel's definition with the compiler's own message."""


class LaunchError(TileSafeError):
    """Arguments, grid or preconditions of a launch are wrong."""


class AliasError(TileSafeError):
    """An output shares bytes with another argument or with itself."""


class OwnershipError(TileSafeError):
    """A tensor is used while lent, or after it was given back."""


class SanitizerError(TileSafeError):
    """The reference sanitizer saw a race, an out-of-bounds access or an uninitialised read."""


def render(message: str, loc: Loc | None, help: str | None) -> str:
    lines = [f"error: {message}"]
    if loc is not None:
        lines.append(f"  --> {loc}")
        source = linecache.getline(loc.file, loc.line).rstrip("\n")
        if source:
            gutter = " " * len(str(loc.line))
            lines.append(f" {gutter} |")
            lines.append(f" {loc.line} | {source}")
            lines.append(f" {gutter} | {' ' * (loc.col - 1)}{'^' * max(1, loc.width)}")
    if help:
        lines.append(f"   = help: {help}")
    return "\n".join(lines)


def caller_loc(skip_package: str = "tilesafe") -> Loc | None:
    """The first stack frame outside tilesafe: where the user called us from."""
    import sys
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name == skip_package or name.startswith(skip_package + ".")):
            return _frame_loc(frame)
        frame = frame.f_back
    return None


def _frame_loc(frame) -> Loc:
    """The line and, where Python records it, the column span of the frame's current call."""
    code = frame.f_code
    line, col, width = frame.f_lineno, 1, 1
    try:
        pos = _positions(code)[frame.f_lasti // 2]
        if pos[0] == line and pos[2] is not None and pos[3] is not None and pos[1] == line:
            col, width = pos[2] + 1, max(1, pos[3] - pos[2])
    except (AttributeError, IndexError, ValueError, TypeError):
        pass
    return Loc(code.co_filename, line, col, width)


# Positions of the instructions of code objects seen, by id (hashing a code object walks its
# constants): listing them costs as much as the function is long, and a launch from a loop
# asks again and again (partitions record where they were lent). The weak reference tells a
# reused id from the object it was recorded for.
_POSITIONS: dict = {}


def _positions(code) -> list:
    entry = _POSITIONS.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1]
    positions = list(code.co_positions())
    if len(_POSITIONS) >= 512:
        _POSITIONS.clear()
    _POSITIONS[id(code)] = (weakref.ref(code), positions)
    return positions


def at_callers_line(e: "TileSafeError") -> "TileSafeError":
    """An error ready to raise at the user's call: an unlocated one points at the caller's line,
    and tilesafe's own frames are dropped (kernel launches, SIMT launches and autotune use it)."""
    if e.loc is None:
        loc = caller_loc()
        if loc is not None:
            e = type(e)(e.message, loc, e.help)
    return e.with_traceback(None)
