"""Regions with loop-carried values: the blocks of loops and branches, and the names they carry.

A name assigned inside a region and bound before it is carried: it becomes a region argument
and a result of the op, and its type must not change. The statement lowering (statements.py)
and the walks that open regions of their own (walks.py, last_arrival.py) share these; a
region's statements are lowered through `b.lower_body` (recursive descent: statements.py
lowers the bodies, and these helpers sit below it).
"""
from __future__ import annotations

import ast
import dataclasses

from ..errors import KernelError, Loc
from .builder import PY_SCALARS, Builder, describe
from .ir import Block, TileType, Value


def assigned_names(stmts) -> list[str]:
    """Names a list of statements assigns (in first-assignment order), nested blocks included."""
    seen: dict[str, None] = {}
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                seen.setdefault(node.id, None)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                seen.setdefault(node.target.id, None)
    return list(seen)


def carried_names(b: Builder, stmts, exclude=()) -> list[str]:
    return [n for n in assigned_names(stmts)
            if n in b.env and n not in exclude and isinstance(b.env[n], (Value, *PY_SCALARS))]


def materialize(b: Builder, x) -> Value:
    if isinstance(x, Value):
        return x
    return b.const(x)


def coerce_carried(b: Builder, name: str, new, want: TileType, node, in_branch: bool = False) -> Value:
    if isinstance(new, PY_SCALARS) and want.shape == ():
        return b.const(new, want.dtype)
    if not isinstance(new, Value) or new.type != want:
        got = describe(new) if not isinstance(new, Value) else str(new.type)
        # Suggest the type the loop body (or the `if` branch, whose type is `want`) gives it:
        # initialising with that is what makes the code well typed.
        shown = want if in_branch else (new.type if isinstance(new, Value) else None)
        example = f" (e.g. ts.zeros({shown.shape}, ts.{shown.dtype.name}))" if shown is not None else ""
        raise KernelError(f"`{name}` changes type inside the loop or branch: {want} before, {got} after",
                          _header_loc(b, node),
                          help=f"a carried variable keeps one shape and dtype; initialise `{name}` with the "
                               f"type the loop or branch gives it{example} or convert with ts.astype")
    return new


def _header_loc(b: Builder, node) -> Loc:
    """The loop's or branch's header (`for k in range(4)`, `if c`), not just its first letter."""
    loc = b.src.loc(node)
    head = getattr(node, "iter", None) or getattr(node, "test", None)
    if head is not None and getattr(head, "end_lineno", None) == node.lineno:
        loc = dataclasses.replace(loc, width=max(1, head.end_col_offset - node.col_offset))
    return loc


def run_region(b: Builder, args: list[Value], bind, stmts, carried: list[str], node, extra_yield=()) -> Block:
    """Lower `stmts` into a new block whose args are `args`; yield the carried names."""
    outer_block, outer_env = b.block, b.env
    b.block, b.env = Block(list(args)), dict(outer_env)
    try:
        bind(b.env)
        b.lower_body(stmts)
        carried_args = args[-len(carried):] if carried else []
        outs = [coerce_carried(b, n, b.env.get(n), a.type, node) for n, a in zip(carried, carried_args)]
        b.emit("yield", tuple(extra_yield) + tuple(outs))
        return b.block
    finally:
        b.block, b.env = outer_block, outer_env


def rebind_after(b: Builder, carried: list[str], results) -> None:
    for name, v in zip(carried, results):
        b.env[name] = v


def counted_loop(b: Builder, node: ast.For, lo: Value, hi: Value, step: Value, iv: Value, target) -> None:
    """A `for` op over [lo, hi) by step with induction variable `iv`; the loop's name is bound
    to `target` in the body (`iv` itself, or an index minted from it)."""
    carried = carried_names(b, node.body, exclude=(node.target.id,))
    inits = [materialize(b, b.env[n]) for n in carried]
    args_ = [iv] + [Value(v.type, n) for n, v in zip(carried, inits)]

    def bind(env):
        env[node.target.id] = target
        env.update(zip(carried, args_[1:]))

    b.loop_depth += 1
    try:
        body = run_region(b, args_, bind, node.body, carried, node)
    finally:
        b.loop_depth -= 1
    results = b.emit("for", (lo, hi, step, *inits), [v.type for v in inits], {}, (body,))
    rebind_after(b, carried, results)


def lower_branch(b: Builder, stmts):
    """`stmts` lowered into a block of their own: (the names they leave bound, the block)."""
    outer_block, outer_env = b.block, b.env
    b.block, b.env = Block(), dict(outer_env)
    try:
        b.lower_body(stmts)
        return b.env, b.block
    finally:
        b.block, b.env = outer_block, outer_env
