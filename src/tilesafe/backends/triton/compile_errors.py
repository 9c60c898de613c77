"""Triton failing to compile a kernel tilesafe accepted: a `ts.CompileError` at the kernel's
definition, with the compiler's own message, instead of a raw exception from inside Triton.

A kernel that passed every tilesafe check should compile. When Triton's compiler raises or
crashes on it anyway (Triton 3.6 fails in its TritonGPUCoalesce pass on a branch whose
condition it folds: tests/fuzz/test_finds.py), that is a compiler bug, not the user's, and
the user needs to know which kernel and what to do. A compile failure is told apart from a
launch failure (a CUDA error, a kernel too large to load) by where it was raised: inside
`triton.compile`, which both the JIT's first launch and ahead-of-time compiles go through.
"""
from __future__ import annotations

import os
import traceback

from ...errors import CompileError, TileSafeError

_COMPILER = os.path.join("triton", "compiler", "compiler.py")
_MAX_LINES = 12              # of the compiler's message: its first lines say what failed


def compile_error(kernel, e: BaseException) -> CompileError | None:
    """The CompileError to raise instead of `e`, or None when `e` is no compiler failure."""
    if isinstance(e, TileSafeError) or not _raised_while_compiling(e):
        return None
    lines = (str(e).strip() or type(e).__name__).splitlines()
    said = "\n".join(lines[:_MAX_LINES]) + ("\n..." if len(lines) > _MAX_LINES else "")
    return CompileError(f"Triton failed to compile `{kernel.name}` ({type(e).__name__}):\n{said}",
                        loc=kernel.src.loc(kernel.src.tree),
                        help="this is a compiler bug, not an error in your kernel: please report it with the kernel "
                             "(TILESAFE_DUMP=1 prints the Triton source tilesafe generated); meanwhile, writing the "
                             "failing part differently (e.g. a condition that is always true or false) may avoid it")


def _raised_while_compiling(e: BaseException) -> bool:
    for frame, _ in traceback.walk_tb(e.__traceback__):
        code = frame.f_code
        if code.co_name == "compile" and code.co_filename.endswith(_COMPILER):
            return True
    return False
