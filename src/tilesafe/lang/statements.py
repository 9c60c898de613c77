"""Lowering of statements: assignment, control flow with loop-carried values, walks.

Loops and dynamic `if`s become ops with regions (regions.py: a name assigned inside a region
and bound before it is carried, and its type must not change). `if` on a compile-time
condition lowers only the branch taken.
"""
from __future__ import annotations

import ast

from .. import dtypes as dt
from . import typing_rules as rules
from .builder import PY_SCALARS, Builder, describe
from .expressions import BINOPS, lower_expr
from .inline import ReturnValue
from .ir import Block, Op, TileType, Value
from .last_arrival import is_arrival_test, lower_arrival_if, lower_members
from .objects import BoundMethod, MintedIndex, TensorArg
from .regions import (assigned_names, carried_names, coerce_carried, counted_loop, lower_branch, materialize,
                      rebind_after, run_region)
from .unsupported_syntax import STATEMENT_HELP
from .walks import lower_walk


def lower_body(b: Builder, stmts: list[ast.stmt]) -> None:
    """Lower `stmts` in order. The frontend hands this to the Builder: regions and inlined
    functions below this module lower their bodies through `b.lower_body`."""
    for s in stmts:
        lower_stmt(b, s)


def lower_stmt(b: Builder, node: ast.stmt) -> None:
    handler = _HANDLERS.get(type(node))
    if handler is None:
        raise b.error(node, f"`{type(node).__name__}` statements are not supported in a kernel",
                      help=STATEMENT_HELP.get(type(node), "rewrite it with assignments, if, for and while"))
    saved = b.loc
    b.loc = b.src.loc(node)
    try:
        handler(b, node)
    except rules.TypingError as e:
        raise b.error(node, str(e), e.help) from None
    finally:
        b.loc = saved


def _expr(b, node):
    return lower_expr(b, node)


# --- simple statements ----------------------------------------------------------------------
def _assign(b: Builder, node: ast.Assign) -> None:
    value = _expr(b, node.value)
    for target in node.targets:
        bind_target(b, target, value)


def bind_target(b: Builder, target: ast.expr, value) -> None:
    if isinstance(target, ast.Name):
        b.env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)):
        items = _unpack(b, target, value)
        for t, v in zip(target.elts, items):
            bind_target(b, t, v)
    elif isinstance(target, (ast.Attribute, ast.Subscript)):
        raise b.error(target, "assigning to an attribute or an element is not supported in a kernel",
                      help="outputs are written with `z.store(tile)`; tiles are values, build a new one instead")
    else:
        raise b.error(target, "unsupported assignment target")


def _unpack(b: Builder, target, value):
    if isinstance(value, MintedIndex):
        value = value.values
    if not isinstance(value, tuple) or len(value) != len(target.elts):
        raise b.error(target, f"cannot unpack {describe(value)} into {len(target.elts)} names")
    return value


def _aug_assign(b: Builder, node: ast.AugAssign) -> None:
    if not isinstance(node.target, ast.Name):
        raise b.error(node.target, "only names can be updated with an augmented assignment")
    name = node.target.id
    if name not in b.env:
        raise b.error(node.target, f"`{name}` is updated before it is assigned")
    b.env[name] = b.binary(BINOPS[type(node.op)], b.env[name], _expr(b, node.value))


def _expr_stmt(b: Builder, node: ast.Expr) -> None:
    if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return   # a docstring
    _expr(b, node.value)


def _pass(b: Builder, node) -> None:
    return None


def _return(b: Builder, node: ast.Return) -> None:
    raise ReturnValue(_expr(b, node.value) if node.value is not None else None)


# --- for loops ---------------------------------------------------------------------------
def _for(b: Builder, node: ast.For) -> None:
    if node.orelse:
        raise b.error(node, "`for ... else` is not supported in a kernel")
    it = node.iter
    if isinstance(it, ast.Call):
        callee = _expr(b, it.func)
        if callee is range:
            return _for_range(b, node, [_expr(b, a) for a in it.args])
        on_tensor = isinstance(callee, BoundMethod) and isinstance(callee.obj, TensorArg)
        if on_tensor and callee.name in ("tiles", "subtiles", "scatter"):
            return lower_walk(b, node, callee.obj, callee.name, it)
        if on_tensor and callee.name == "members":
            return lower_members(b, node, callee.obj, it)
    seq = _expr(b, it)
    if isinstance(seq, tuple):   # a compile-time tuple: unrolled
        for item in seq:
            bind_target(b, node.target, item)
            lower_body(b, node.body)
        return
    raise b.error(it, f"cannot loop over {describe(seq)}",
                  help="loop with `range(...)`, `z.tiles()`, `z.subtiles(shape)` or over a tuple")


def _for_range(b: Builder, node: ast.For, args) -> None:
    if not 1 <= len(args) <= 3:
        raise b.error(node.iter, "range() takes 1 to 3 arguments")
    lo, hi, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    if not isinstance(step, int) or step == 0:
        raise b.error(node.iter, "the step of a kernel range must be a nonzero compile-time int")
    for x in (lo, hi):
        if isinstance(x, Value) and (x.shape != () or not x.dtype.is_int):
            raise b.error(node.iter, f"range bounds must be integer scalars, got {x.type}")
        if not isinstance(x, (Value, int)) or isinstance(x, bool):
            raise b.error(node.iter, f"range bounds must be integers, got {describe(x)}")
    if not isinstance(node.target, ast.Name):
        raise b.error(node.target, "the loop variable of a range must be a single name")
    idx_dtype = dt.i64 if any(isinstance(x, Value) and x.dtype == dt.i64 for x in (lo, hi)) else dt.i32
    lo_v, hi_v, step_v = (b.as_value(x, idx_dtype) for x in (lo, hi, step))
    iv = Value(TileType((), idx_dtype), node.target.id)
    counted_loop(b, node, lo_v, hi_v, step_v, iv, iv)


# --- while loops --------------------------------------------------------------------------
def _while(b: Builder, node: ast.While) -> None:
    if node.orelse:
        raise b.error(node, "`while ... else` is not supported in a kernel")
    carried = carried_names(b, node.body)
    inits = [materialize(b, b.env[n]) for n in carried]
    before_args = [Value(v.type, n) for n, v in zip(carried, inits)]
    body_args = [Value(v.type, n) for n, v in zip(carried, inits)]

    outer_block, outer_env = b.block, b.env
    b.block, b.env = Block(list(before_args)), dict(outer_env)
    b.env.update(zip(carried, before_args))
    try:
        cond = _expr(b, node.test)
        if isinstance(cond, PY_SCALARS):
            raise b.error(node.test, "the condition of a kernel `while` must depend on runtime values",
                          help="use `for ... in range(n)` for a fixed number of iterations")
        cond = b.as_value(cond)
        if cond.shape != ():
            raise b.error(node.test, f"the condition of `while` must be a scalar, got {cond.type}")
        cond = b.cast(cond, dt.bool_)
        b.emit("yield", (cond, *before_args))
        before = b.block
    finally:
        b.block, b.env = outer_block, outer_env

    b.loop_depth += 1
    try:
        body = run_region(b, body_args, lambda env: env.update(zip(carried, body_args)), node.body, carried, node)
    finally:
        b.loop_depth -= 1
    results = b.emit("while", tuple(inits), [v.type for v in inits], {}, (before, body))
    rebind_after(b, carried, results)


# --- if / else --------------------------------------------------------------------------
def _if(b: Builder, node: ast.If) -> None:
    if is_arrival_test(b, node.test):
        return lower_arrival_if(b, node)
    cond = _expr(b, node.test)
    if isinstance(cond, (*PY_SCALARS, type(None), tuple, str)):   # compile-time: lower one branch
        lower_body(b, node.body if cond else node.orelse)
        return
    if not isinstance(cond, Value):
        raise b.error(node.test, f"cannot branch on {describe(cond)}")
    if cond.shape != ():
        raise b.error(node.test, f"an `if` condition must be a scalar, got a {cond.type} tile",
                      help="use ts.where(cond, a, b) for elementwise choice")
    cond = b.cast(cond, dt.bool_)
    names = assigned_names(node.body + node.orelse)
    then_env, then_block = lower_branch(b, node.body)
    else_env, else_block = lower_branch(b, node.orelse)
    merged, types = [], []
    for n in names:
        t, e = then_env.get(n), else_env.get(n)
        if t is None or e is None:
            continue
        if t is e:
            b.env[n] = t
            continue
        ty = _merge_type(b, n, t, e, node)
        if ty is None:
            b.env.pop(n, None)   # not a value both branches agree on: unusable after the if
            continue
        merged.append(n)
        types.append(ty)
    then_block.ops.append(_yield_for(b, then_env, merged, types, then_block, node))
    else_block.ops.append(_yield_for(b, else_env, merged, types, else_block, node))
    results = b.emit("if", (cond,), types, {}, (then_block, else_block))
    for n, v in zip(merged, results):
        b.env[n] = v


def _merge_type(b: Builder, name, t, e, node):
    if isinstance(t, Value) and isinstance(t.type, TileType):
        return t.type
    if isinstance(e, Value) and isinstance(e.type, TileType):
        return e.type
    if isinstance(t, PY_SCALARS) and isinstance(e, PY_SCALARS):
        return TileType((), rules.python_scalar_dtype(t if isinstance(t, float) else e))
    return None


def _yield_for(b: Builder, env, names, types, block, node):
    outer = b.block
    b.block = block
    try:
        vals = tuple(coerce_carried(b, n, env[n], ty, node, in_branch=True) for n, ty in zip(names, types))
    finally:
        b.block = outer
    return Op("yield", vals, (), {}, (), b.loc)


_HANDLERS = {
    ast.Assign: _assign, ast.AugAssign: _aug_assign, ast.Expr: _expr_stmt, ast.Pass: _pass,
    ast.For: _for, ast.While: _while, ast.If: _if, ast.Return: _return,
}
