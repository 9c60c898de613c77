"""Lowering of expressions: names, constants, operators, attributes, subscripts, calls.

Compile-time values (Python ints, floats, bools, dtypes, tuples) are folded here, so
`Const` parameters and module-level constants never reach the IR as values.
"""
from __future__ import annotations

import ast
import builtins
import types

from .. import dtypes
from ..dtypes import DType
from . import typing_rules as rules
from .builder import PY_SCALARS, Builder, describe
from .calls import lower_call, matmul
from .ir import TileType, Value
from .inline import inline_call
from .methods import attribute_of, call_method
from .objects import BoundMethod, DeviceFunction, MintedIndex
from .unsupported_syntax import EXPRESSION_HELP

BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
          ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
          ast.Pow: "pow", ast.MatMult: "@"}
CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
ALLOWED_BUILTINS = {"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "tuple",
                    "True", "False", "None", "isinstance"}


def lower_expr(b: Builder, node: ast.expr):
    handler = _HANDLERS.get(type(node))
    if handler is None:
        raise b.error(node, f"`{type(node).__name__}` expressions are not supported in a kernel",
                      help=EXPRESSION_HELP.get(type(node), "use tile operations from the ts namespace"))
    try:
        return handler(b, node)
    except rules.TypingError as e:
        raise b.error(node, str(e), e.help) from None


def _constant(b, node: ast.Constant):
    return node.value


def _name(b: Builder, node: ast.Name):
    if node.id in b.env:
        return b.env[node.id]
    if node.id in b.scope:
        return resolve_outer(b, node, node.id, b.scope[node.id])
    if node.id in ALLOWED_BUILTINS and hasattr(builtins, node.id):
        return getattr(builtins, node.id)
    if hasattr(builtins, node.id):
        raise b.error(node, f"the builtin `{node.id}` is not available in a kernel")
    raise b.error(node, f"`{node.id}` is not defined",
                  help="a name is visible after it is assigned, and loop variables only inside their loop")


def resolve_outer(b: Builder, node, name: str, value):
    """A module-level or closure value: constants, modules and device functions only (S2)."""
    if isinstance(value, (*PY_SCALARS, DType, str, type(None))) or callable(value) or isinstance(value, types.ModuleType):
        if _is_tensor(value):
            raise _capture_error(b, node, name)
        return value
    if isinstance(value, tuple) and all(isinstance(v, (*PY_SCALARS, DType)) for v in value):
        return value
    if _is_tensor(value):
        raise _capture_error(b, node, name)
    raise b.error(node, f"the kernel refers to `{name}` ({type(value).__name__}) from outside; "
                        "only numbers, dtypes, tuples of them, modules and @ts.function helpers can be captured",
                  help="pass it as a parameter")


def _is_tensor(value) -> bool:
    mod = type(value).__module__ or ""
    return mod.startswith(("tilesafe.runtime", "torch", "numpy")) and not callable(value)


def _capture_error(b, node, name):
    return b.error(node, f"the kernel captures the tensor `{name}` from outside its parameters",
                   help=f"pass `{name}` as a parameter (ts.Ref for reading); kernels may not capture tensors")


def _attribute(b: Builder, node: ast.Attribute):
    obj = lower_expr(b, node.value)
    attr = node.attr
    if isinstance(obj, types.ModuleType):
        if not hasattr(obj, attr):
            raise b.error(node, f"module `{obj.__name__}` has no `{attr}`")
        return resolve_outer(b, node, f"{obj.__name__}.{attr}", getattr(obj, attr))
    return attribute_of(b, node, obj, attr)


def _subscript(b: Builder, node: ast.Subscript):
    obj = lower_expr(b, node.value)
    index = _index(b, node.slice)
    if isinstance(obj, MintedIndex):
        if not isinstance(index, int) or not -len(obj) <= index < len(obj):
            raise b.error(node, f"a tile index of `{obj.brand.name}` has {len(obj)} coordinates; index it with 0..{len(obj) - 1}")
        return obj.values[index]
    if isinstance(obj, tuple):
        if isinstance(index, (int, slice)):
            try:
                return obj[index]
            except IndexError:
                raise b.error(node, f"index {index} is out of range for a tuple of {len(obj)}") from None
        raise b.error(node, "tuples are indexed with compile-time integers")
    if isinstance(obj, Value) and isinstance(obj.type, TileType):
        return _tile_subscript(b, node, obj, index)
    raise b.error(node, f"cannot index {describe(obj)}",
                  help="load tiles from tensors with ts.load / px.load, then combine tiles")


def _index(b, node: ast.expr):
    """A subscript's index: slices may appear on their own or inside a tuple (`t[:, None]`)."""
    if isinstance(node, ast.Slice):
        return _slice(b, node)
    if isinstance(node, ast.Tuple):
        return tuple(_index(b, e) for e in node.elts)
    return lower_expr(b, node)


def _slice(b, s: ast.Slice):
    parts = [lower_expr(b, p) if p is not None else None for p in (s.lower, s.upper, s.step)]
    return slice(*parts)


def _tile_subscript(b: Builder, node, v: Value, index):
    """`t[:, None]`: full slices keep an axis, None inserts a size-1 axis."""
    items = index if isinstance(index, tuple) else (index,)
    shape, axis = [], 0
    for it in items:
        if it is None:
            shape.append(1)
        elif isinstance(it, slice) and it == slice(None):
            if axis >= len(v.shape):
                raise b.error(node, f"too many indices for a {v.type} tile")
            shape.append(v.shape[axis])
            axis += 1
        else:
            raise b.error(node, "tiles support only `:` and `None` in subscripts",
                          help="use ts.reshape / ts.expand_dims; elements of a tile cannot be picked out")
    shape.extend(v.shape[axis:])
    return b.emit1("reshape", (v,), TileType(tuple(shape), v.dtype), {"shape": tuple(shape)})


def _binop(b: Builder, node: ast.BinOp):
    op = BINOPS[type(node.op)]
    left, right = lower_expr(b, node.left), lower_expr(b, node.right)
    if op == "@":
        return matmul(b, node, left, right)
    if op == "pow":
        return _power(b, node, left, right)
    if isinstance(left, tuple) and isinstance(right, tuple) and op == "+":
        return left + right
    return b.binary(op, left, right)


def _power(b, node, base, exponent):
    if isinstance(base, PY_SCALARS) and isinstance(exponent, PY_SCALARS):
        return base ** exponent
    if isinstance(exponent, int) and 1 <= exponent <= 4:
        out = base
        for _ in range(exponent - 1):
            out = b.binary("*", out, base)
        return out
    raise b.error(node, "`**` on tiles takes a small constant integer exponent (1 to 4)",
                  help="use ts.exp2(y * ts.log2(x)) for general powers")


def _unaryop(b: Builder, node: ast.UnaryOp):
    v = lower_expr(b, node.operand)
    if isinstance(v, PY_SCALARS):
        return {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Not: lambda x: not x,
                ast.Invert: lambda x: ~x}[type(node.op)](v)
    if isinstance(node.op, ast.UAdd):
        return v
    return b.unary({ast.USub: "neg", ast.Not: "not", ast.Invert: "invert"}[type(node.op)], v)


def _compare(b: Builder, node: ast.Compare):
    if len(node.ops) != 1:
        raise b.error(node, "chained comparisons are not supported in a kernel",
                      help="combine two comparisons with `&`")
    left, right = lower_expr(b, node.left), lower_expr(b, node.comparators[0])
    op = node.ops[0]
    if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
        if isinstance(left, Value) or isinstance(right, Value):
            raise b.error(node, "`is` / `in` work only on compile-time values")
        return {ast.Is: lambda: left is right, ast.IsNot: lambda: left is not right,
                ast.In: lambda: left in right, ast.NotIn: lambda: left not in right}[type(op)]()
    if isinstance(left, (DType, tuple, str, type(None))) or isinstance(right, (DType, tuple, str, type(None))):
        return {ast.Eq: left == right, ast.NotEq: left != right}.get(type(op), None) \
            if type(op) in (ast.Eq, ast.NotEq) else _bad_compare(b, node)
    return b.compare(CMPOPS[type(op)], left, right)


def _bad_compare(b, node):
    raise b.error(node, "only == and != compare dtypes, tuples and strings")


def _boolop(b: Builder, node: ast.BoolOp):
    is_and = isinstance(node.op, ast.And)
    acc = lower_expr(b, node.values[0])
    for sub in node.values[1:]:
        if isinstance(acc, PY_SCALARS):   # compile-time: short-circuit like Python
            if bool(acc) != is_and:
                return acc
            acc = lower_expr(b, sub)
            continue
        rhs = lower_expr(b, sub)
        acc = b.binary("&" if is_and else "|", b.cast(b.as_value(acc), _bool()), b.cast(b.as_value(rhs), _bool()))
    return acc


def _bool():
    return dtypes.bool_


def _ifexp(b: Builder, node: ast.IfExp):
    cond = lower_expr(b, node.test)
    if not isinstance(cond, Value):
        return lower_expr(b, node.body if cond else node.orelse)
    return b.where(cond, lower_expr(b, node.body), lower_expr(b, node.orelse))


def _tuple(b: Builder, node):
    return tuple(lower_expr(b, e) for e in node.elts)


def _call(b: Builder, node: ast.Call):
    saved = b.loc
    b.loc = b.src.loc(node)   # ops a call emits point at the call, not the whole statement
    try:
        return _lower_call(b, node)
    finally:
        b.loc = saved


def _lower_call(b: Builder, node: ast.Call):
    callee = lower_expr(b, node.func)
    args = []
    for a in node.args:
        if isinstance(a, ast.Starred):
            seq = lower_expr(b, a.value)
            if not isinstance(seq, tuple):
                raise b.error(a, "only tuples can be unpacked with * in a kernel call")
            args.extend(seq)
        else:
            args.append(lower_expr(b, a))
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise b.error(kw, "`**kwargs` is not supported in a kernel call")
        kwargs[kw.arg] = lower_expr(b, kw.value)
    if isinstance(callee, DeviceFunction):
        return inline_call(b, node, callee, args, kwargs)
    if isinstance(callee, BoundMethod):
        return call_method(b, node, callee, args, kwargs)
    return lower_call(b, node, callee, args, kwargs)


_HANDLERS = {
    ast.Constant: _constant, ast.Name: _name, ast.Attribute: _attribute, ast.Subscript: _subscript,
    ast.BinOp: _binop, ast.UnaryOp: _unaryop, ast.Compare: _compare, ast.BoolOp: _boolop,
    ast.IfExp: _ifexp, ast.Tuple: _tuple, ast.List: _tuple, ast.Call: _call,
}
