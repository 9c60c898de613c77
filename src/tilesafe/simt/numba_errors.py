"""numba-cuda refusing a SIMT kernel: a `ts.KernelError` at the user's line, not numba's exception.

The analysis accepts what the CPU executor can run; numba-cuda then types every value of the
generated source for the GPU, and some code the CPU runs it cannot type (a `math` function
CUDA lacks, a float used as an index). numba names a line of the generated source (in its
message, or on the typing constraint that failed, found on the traceback); the generated
kernel is unparsed from a tree whose statements keep the user's line numbers
(`lower_numba.lowered_kernel`), so parsing the text again and walking both trees side by side
finds the user's statement. A line numba does not give, or one in tilesafe's own prelude,
points at the kernel's `def`.
"""
from __future__ import annotations

import ast
import re
import traceback

from ..errors import KernelError

_MAX_LINES = 6          # of numba's message: its first lines say what failed


def kernel_error(kernel, consts: dict, e: BaseException) -> KernelError | None:
    """The KernelError to raise instead of `e`, or None when `e` is not numba's refusal."""
    if not _is_numba_error(e):
        return None
    name = f"simt_{kernel.name}"
    lines = _generated_lines(e, f"<simt kernel {name}>")
    node = _user_statement(kernel.lowered_for(consts), kernel.source_for(consts), lines)
    loc = kernel.src.loc(node if node is not None else kernel.src.tree)
    return KernelError(f"numba-cuda cannot compile this line of `{kernel.name}` for the GPU: {_said(e)}", loc,
                       help="numba-cuda types every value for the GPU: use the operations docs/simt.md lists, int "
                            "indices and one type per variable (CPU tensors run the kernel on the CPU executor, "
                            "which does not type it)")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")      # a terminal colour code


def _is_numba_error(e: BaseException) -> bool:
    """numba's errors (numba.core's and numba-cuda's copy of them) derive from a NumbaError."""
    return any(c.__name__ == "NumbaError" and c.__module__.startswith("numba") for c in type(e).__mro__)


def _said(e: BaseException) -> str:
    """numba's own words, without its pipeline banner, source excerpts and module paths."""
    kept = []
    for raw in _ANSI.sub("", str(e)).splitlines():      # numba colours its words on some terminals
        text = raw.strip()
        if text.startswith(("File ", "During:", "<source missing", "There are ")):
            break
        if text and not text.startswith("Failed in "):
            kept.append(re.sub(r"<module '(\w+)'[^>]*>", r"\1", text))
    said = " ".join(kept[:_MAX_LINES]) + (" ..." if len(kept) > _MAX_LINES else "")
    return said or type(e).__name__


def _generated_lines(e: BaseException, filename: str) -> list[int]:
    """Lines of the generated source numba blames, best first: those in its message, then those
    of the constraints (or statements) it was typing when it failed, innermost first (a call
    into tilesafe's prelude fails inside the prelude, and the kernel's line is further out)."""
    lines = [int(n) for n in re.findall(rf'File "{re.escape(filename)}", line (\d+)', str(e))]
    for frame, _ in reversed(list(traceback.walk_tb(e.__traceback__))):
        for value in frame.f_locals.values():
            try:
                loc = getattr(value, "loc", value)
                if getattr(loc, "filename", None) == filename and isinstance(getattr(loc, "line", None), int):
                    lines.append(loc.line)
            except Exception:       # an object half made when numba failed: not what we look for
                continue
    return lines


def _user_statement(lowered: ast.FunctionDef, source: str, lines: list[int]) -> ast.stmt | None:
    """The statement of `lowered` (user line numbers) on the first of `lines` of `source` (the
    text compiled: `lowered` unparsed after tilesafe's prelude) that falls in the kernel."""
    again = [f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.name == lowered.name][-1]
    pairs = list(_statement_pairs(lowered.body, again.body))
    for line in lines:
        found = None
        for ours, theirs in pairs:
            if theirs.lineno <= line <= theirs.end_lineno:
                found = ours        # pairs come outer first: the last match is the innermost
        if found is not None:
            return found
    return None


def _statement_pairs(ours: list, theirs: list):
    """Statements of two trees of one structure, side by side, each before those it holds.
    (Unparsing then parsing keeps the statements; expressions may change shape, e.g. -1.)"""
    for a, b in zip(ours, theirs):
        yield a, b
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _statement_pairs(getattr(a, field, []) or [], getattr(b, field, []) or [])

