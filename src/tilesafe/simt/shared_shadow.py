"""The GPU sanitizer for shared memory: a shadow "written" bit per element (`sanitize=True`).

The CPU executor reports a read of a shared element that no permit wrote (e.g. a padding
column); on the GPU, a kernel defined with `sanitize=True` does the same. Each shared array `s`
gets a shadow `s__w` of one byte per element, in shared memory too: every thread of the block
clears its strided share right after the declaration (then a barrier: the declaration is at the
top level, so every thread reaches it), a permit write `s[p] = v` sets `s__w[p] = 1`, and every
read or atomic of `s` checks it (lower_numba.py's `__lds*` / `__gets*`). An unwritten element sets
the kernel's error flag to its line + UNINITIALISED, which `sync()` reports as a SanitizerError
at that line. A dynamic shared array's shadow lives in the dynamic pool after its data, so the
pool is `pool_bytes` long.
"""
from __future__ import annotations

import ast
import copy

from .analysis import static_elements


def name_of(array: str) -> str:
    return f"{array}__w"


def declare(decl, shape: list, flat_thread, threads: int) -> list:
    """The shadow's declaration, cleared by the block's threads, then a barrier: statements that
    follow the array's own declaration. `shape`: the array's extents as expressions."""
    w = name_of(decl.name)
    if decl.dynamic:
        n = shape[0]
        start = _parse(f"({ast.unparse(n)} * {decl.dtype.itemsize} + 15) // 16 * 16")
        stop = ast.BinOp(copy.deepcopy(start), ast.Add(), copy.deepcopy(n))
        value = ast.Subscript(_parse("cuda.shared.array(0, __types.uint8)"), ast.Slice(start, stop, None), ast.Load())
    else:
        value = ast.Call(_parse("cuda.shared.array"), [ast.Tuple([copy.deepcopy(e) for e in shape], ast.Load()),
                                                       _parse("__types.uint8")], [])
    total = shape[0]
    for e in shape[1:]:
        total = ast.BinOp(total, ast.Mult(), copy.deepcopy(e))
    z = f"{w}_z"
    index = _flat_to_coords(z, [ast.unparse(e) for e in shape])
    clear = ast.For(ast.Name(z, ast.Store()),
                    ast.Call(ast.Name("range", ast.Load()), [copy.deepcopy(flat_thread), copy.deepcopy(total),
                                                             ast.Constant(threads)], []),
                    [_parse_stmt(f"{w}[{index}] = 0")], [])
    return [ast.Assign([ast.Name(w, ast.Store())], value), clear, _parse_stmt("cuda.syncthreads()")]


def mark(target: ast.Subscript) -> ast.stmt:
    """`s__w[index] = 1` beside the write `s[index] = v`."""
    return ast.copy_location(ast.Assign([ast.Subscript(ast.Name(name_of(target.value.id), ast.Load()),
                                                       copy.deepcopy(target.slice), ast.Store())],
                                         ast.Constant(1)), target)


def pool_bytes(decl, size: int) -> int:
    """Dynamic shared memory for a dynamic array of `size` elements and its shadow."""
    return -(-size * decl.dtype.itemsize // 16) * 16 + size


def static_shadow_bytes(info, consts: dict) -> int:
    """The static arrays' shadows: a byte per element."""
    return sum(static_elements(d, consts) for d in info.shared.values() if not d.dynamic)


def _flat_to_coords(z: str, extents: list) -> str:
    if len(extents) == 1:
        return z
    if len(extents) == 2:
        return f"{z} // ({extents[1]}), {z} % ({extents[1]})"
    return f"{z} // (({extents[1]}) * ({extents[2]})), {z} // ({extents[2]}) % ({extents[1]}), {z} % ({extents[2]})"


def _parse(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _parse_stmt(text: str) -> ast.stmt:
    return ast.parse(text).body[0]
