"""The IR builder: the current block, the name environment, and typed op emission.

Statement and expression lowering (`statements.py`, `expressions.py`, `calls.py`) call
into this class; it owns every rule about how operands are converted (weak Python scalars,
casts, broadcasts) so those rules live in one place.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Callable

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import KernelError, Loc
from . import typing_rules as rules
from .ir import Block, Op, TileType, Value
from .objects import MintedIndex, RefView, TensorArg
from .source import KernelSource

PY_SCALARS = (bool, int, float)


@dataclass(frozen=True)
class Bindings:
    """What a specialization knows before it builds the IR."""
    consts: dict            # Const parameter -> Python value
    tensors: dict           # tensor parameter -> (dtype, rank, tile or None)
    scalars: dict           # runtime scalar parameter -> DType


class Builder:
    def __init__(self, src: KernelSource, unsafe: bool, lower_body: Callable[["Builder", list], None]):
        self.src = src
        # Statement lowering (statements.lower_body), handed in by the frontend: lowering is
        # recursive descent (a loop's or an inlined @ts.function's body holds statements), and
        # the helpers below statements.py (regions.py, inline.py) lower nested bodies through
        # this instead of importing statements.py back.
        self._lower_body = lower_body
        self.unsafe = unsafe
        self.scope = src.globals_and_closure()
        self.block = Block()
        self.env: dict[str, object] = {}
        self.loop_depth = 0
        self.inline_depth = 0
        self.grid_rank = 1
        self.loc: Loc | None = None          # location of the statement being lowered
        self.loads: dict[int, Op] = {}       # id(value) -> the load that produced it (for ts.valid)
        self.root = self.block               # the kernel body (the last-arrival `if` sits here)
        self.arrival = None                  # S16: None before `if ts.last_arrival():`, "in", "after"

    def lower_body(self, stmts: list[ast.stmt]) -> None:
        """Lower `stmts` into the current block."""
        self._lower_body(self, stmts)

    # --- errors ------------------------------------------------------------------------
    def error(self, node: ast.AST | None, message: str, help: str | None = None) -> KernelError:
        loc = self.src.loc(node) if node is not None else self.loc
        return KernelError(message, loc, help)

    # --- emission ----------------------------------------------------------------------
    def emit(self, opcode: str, args=(), types=(), attrs=None, regions=(), loc=None) -> tuple[Value, ...]:
        results = tuple(Value(t) for t in types)
        self.block.ops.append(Op(opcode, tuple(args), results, attrs or {}, tuple(regions), loc or self.loc))
        return results

    def emit1(self, opcode: str, args, type_, attrs=None) -> Value:
        return self.emit(opcode, args, (type_,), attrs)[0]

    def const(self, value, dtype: DType | None = None) -> Value:
        dtype = dtype or rules.python_scalar_dtype(value)
        if dtype.is_float:
            value = float(value)
        elif dtype.is_bool:
            value = bool(value)
        else:
            value = int(value)
        return self.emit1("const", (), TileType((), dtype), {"value": value})

    def cast(self, v: Value, dtype: DType) -> Value:
        if v.dtype == dtype:
            return v
        return self.emit1("cast", (v,), TileType(v.shape, dtype), {"dtype": dtype})

    def broadcast(self, v: Value, shape: tuple[int, ...], materialize: bool = False) -> Value:
        """`v` broadcast to `shape`. A scalar stays a scalar (elementwise ops take it as is)
        unless `materialize`: stores and constructors need a value of exactly `shape`."""
        if v.shape == shape or (v.shape == () and not materialize):
            return v
        if len(v.shape) < len(shape):
            padded = (1,) * (len(shape) - len(v.shape)) + v.shape
            v = self.emit1("reshape", (v,), TileType(padded, v.dtype), {"shape": padded})
        if v.shape == shape:
            return v
        return self.emit1("broadcast_to", (v,), TileType(shape, v.dtype), {"shape": shape})

    def as_value(self, x, dtype: DType | None = None) -> Value:
        """A Value for `x`; Python scalars become constants of `dtype` (or their own)."""
        if isinstance(x, Value):
            return x if dtype is None else self.cast(x, dtype)
        if isinstance(x, PY_SCALARS):
            return self.const(x, dtype)
        raise rules.TypingError(f"expected a tile or a number, got {describe(x)}")

    def unify(self, a, b) -> tuple[Value, Value, DType]:
        """Convert two operands (Values or Python scalars) to one dtype and one shape."""
        if isinstance(a, Value) and isinstance(b, Value):
            dtype = rules.promote(a.dtype, b.dtype)
        elif isinstance(a, Value):
            dtype = rules.promote_weak(a.dtype, b)
        elif isinstance(b, Value):
            dtype = rules.promote_weak(b.dtype, a)
        else:
            raise rules.TypingError("internal: unify of two Python scalars")
        a, b = self.as_value(a, dtype), self.as_value(b, dtype)
        shape = rules.broadcast_shapes(a.shape, b.shape)
        return self.broadcast(a, shape), self.broadcast(b, shape), dtype

    # --- arithmetic ----------------------------------------------------------------------
    def binary(self, op: str, a, b) -> object:
        if isinstance(a, PY_SCALARS) and isinstance(b, PY_SCALARS):
            return _fold(op, a, b)
        check_operand(a)
        check_operand(b)
        x, y, dtype = self.unify(a, b)
        if op in ("//", "%") and dtype.is_float:
            raise rules.TypingError(f"`{op}` is defined for integer tiles only",
                                    help="use ts.floor(x / y) for floats")
        if op in ("&", "|", "^", "<<", ">>") and dtype.is_float:
            raise rules.TypingError(f"`{op}` needs integer or bool tiles, got {dtype.name}")
        if op == "/" and not dtype.is_float:
            x, y, dtype = self.cast(x, dt.f32), self.cast(y, dt.f32), dt.f32
        # A scalar operand stays unbroadcast, so the result's shape is that of both.
        shape = rules.broadcast_shapes(x.shape, y.shape)
        return self.emit1("binary", (x, y), TileType(shape, dtype), {"op": op})

    def compare(self, op: str, a, b) -> object:
        if isinstance(a, PY_SCALARS) and isinstance(b, PY_SCALARS):
            return _fold(op, a, b)
        check_operand(a)
        check_operand(b)
        x, y, _ = self.unify(a, b)
        return self.emit1("compare", (x, y), TileType(rules.broadcast_shapes(x.shape, y.shape), dt.bool_), {"op": op})

    def unary(self, op: str, a) -> Value:
        a = self.as_value(a)
        dtype = a.dtype
        if op in FLOAT_MATH and not dtype.is_float:
            a, dtype = self.cast(a, dt.f32), dt.f32
        if op == "not":
            a, dtype = self.cast(a, dt.bool_), dt.bool_
        if op == "invert" and dtype.is_float:
            raise rules.TypingError("`~` needs an integer or bool tile")
        return self.emit1("unary", (a,), TileType(a.shape, dtype), {"op": op})

    def where(self, cond, a, b) -> Value:
        c = self.as_value(cond)
        if not c.dtype.is_bool:
            c = self.compare("!=", c, 0)
        if isinstance(a, PY_SCALARS) and isinstance(b, PY_SCALARS):
            a = self.as_value(a)
        x, y, dtype = self.unify(a, b)
        shape = rules.broadcast_shapes(c.shape, rules.broadcast_shapes(x.shape, y.shape))
        c, x, y = self.broadcast(c, shape), self.broadcast(x, shape), self.broadcast(y, shape)
        return self.emit1("where", (c, x, y), TileType(shape, dtype))


FLOAT_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
              "floor", "ceil")

_PY_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
           "//": operator.floordiv, "%": operator.mod, "&": operator.and_, "|": operator.or_,
           "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift, "max": max, "min": min,
           "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "==": operator.eq, "!=": operator.ne, "pow": operator.pow}


def _fold(op: str, a, b):
    try:
        return _PY_OPS[op](a, b)
    except ZeroDivisionError:
        raise rules.TypingError("division by zero in a compile-time expression") from None


def check_operand(x) -> None:
    if not isinstance(x, (Value, *PY_SCALARS)) or (isinstance(x, Value) and not isinstance(x.type, TileType)):
        raise rules.TypingError(f"expected a tile or a number, got {describe(x)}",
                                help="load tensors into tiles first (e.g. ts.load_tile_like(x, z))")


def describe(x) -> str:
    if isinstance(x, TensorArg):
        return f"the tensor `{x.name}` ({x.kind_name})"
    if isinstance(x, RefView):
        return f"a partition of `{x.tensor.name}`"
    if isinstance(x, MintedIndex):
        return f"a tile index of `{x.brand.name}`"
    if isinstance(x, Value):
        return f"a {x.type} tile"
    if isinstance(x, DType):
        return f"the dtype {x!r}"
    if isinstance(x, tuple):
        return f"a plain tuple of {len(x)} value(s)"
    return f"{type(x).__name__} {x!r}"
