"""The op registry: what each `ts.*` function (and allowed builtin) means to the frontend.

`REGISTRY` maps the callable a kernel names (a stub, a host constructor, a builtin) to a
handler that checks its operands (S3) and emits IR. Memory operations live in `memory.py`.
"""
from __future__ import annotations

import builtins
import inspect
import math

from .. import dtypes as dt
from ..dtypes import DType
from . import stubs
from . import typing_rules as rules
from .builder import PY_SCALARS, Builder, describe
from .ir import TileType, Value

REGISTRY: dict = {}


def register(*callables):
    def deco(handler):
        for c in callables:
            REGISTRY[c] = handler
        return handler
    return deco


def lower_call(b: Builder, node, callee, args, kwargs):
    handler = REGISTRY.get(callee)
    if handler is None:
        name = getattr(callee, "__name__", repr(callee))
        raise b.error(node, f"`{name}` cannot be called in a kernel",
                      help="kernels call ts.* operations, @ts.function helpers and range/min/max/len")
    bound = _bind(b, node, callee, args, kwargs)
    # Positionally, in the stub's order, so `*values` parameters (min, max, print) reach the handler.
    return handler(b, node, *bound.args, **bound.kwargs)


def _bind(b, node, callee, args, kwargs) -> inspect.BoundArguments:
    target = SIGNATURES.get(callee) or inspect.signature(getattr(callee, "__wrapped__", callee))
    try:
        ba = target.bind(*args, **kwargs)
    except TypeError as e:
        name = getattr(callee, '__name__', callee)
        raise b.error(node, f"bad arguments to `{name}`: {e}", help=f"in a kernel it takes {name}{target}") from None
    ba.apply_defaults()
    return ba


def tile(b: Builder, node, x, what="operand") -> Value:
    """`x` as a tile Value (Python scalars become constants)."""
    if isinstance(x, Value) and isinstance(x.type, TileType):
        return x
    if isinstance(x, PY_SCALARS):
        return b.const(x)
    raise b.error(node, f"the {what} must be a tile, got {describe(x)}",
                  help="load tensors into tiles first (ts.load, ts.load_tile_like, z.load())")


def static_int(b: Builder, node, x, what: str) -> int:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise b.error(node, f"{what} must be a compile-time int, got {describe(x)}",
                  help="use a literal or a ts.Const[int] parameter")


MAX_FIRST = 2**31          # grid axis 0 holds fewer blocks than this


def first_block(b: Builder, call, kwargs) -> int:
    """`first=`: the block that takes the walk's first tile (a compile-time int >= 0; default 0).
    Block i takes tiles i - first, plus multiples of the grid (counted modulo the grid): a
    rotation of the blocks, so every tile is still visited by exactly one block. Walks of one
    kernel that start at different blocks run side by side instead of one after another."""
    first = kwargs.get("first", 0)
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise b.error(call, f"first= of a walk must be a compile-time int >= 0, got {describe(first)}",
                      help="first=0 (the default), or a ts.Const[int] parameter: the block that takes tile 0")
    if first >= MAX_FIRST:   # a block id: the Triton backend writes it as a literal beside tl.num_programs
        raise b.error(call, f"first= of a walk names a block, so it is below 2**31, got {first}",
                      help="take it modulo the grid: block first % grid takes tile 0 either way")
    return first


def static_shape(b: Builder, node, shape, what="shape") -> tuple[int, ...]:
    shape = shape if isinstance(shape, tuple) else (shape,)
    for s in shape:
        static_int(b, node, s, what)
    try:
        return rules.check_tile_shape(shape, what)
    except rules.TypingError as e:
        raise b.error(node, str(e), e.help) from None


def dtype_arg(b: Builder, node, x) -> DType:
    if isinstance(x, DType):
        return x
    try:
        return dt.coerce(x)
    except (ValueError, TypeError):
        raise b.error(node, f"expected a dtype such as ts.f32, got {describe(x)}") from None


def axis_arg(b: Builder, node, axis, rank: int) -> int:
    axis = static_int(b, node, axis, "axis")
    if not -rank <= axis < rank:
        raise b.error(node, f"axis {axis} is out of range for a rank-{rank} tile")
    return axis % rank


# --- geometry --------------------------------------------------------------------------------
@register(stubs.block_id)
def _block_id(b: Builder, node, axis):
    return _grid_query(b, node, "block_id", axis)


@register(stubs.num_blocks)
def _num_blocks(b: Builder, node, axis):
    return _grid_query(b, node, "num_blocks", axis)


def _grid_query(b, node, opcode, axis):
    axis = static_int(b, node, axis, "axis")
    if not 0 <= axis < max(1, b.grid_rank):
        raise b.error(node, f"the grid has {b.grid_rank} axis(es); axis {axis} does not exist")
    return b.emit1(opcode, (), TileType((), dt.i32), {"axis": axis})


# --- constructors ------------------------------------------------------------------------------
def zeros_handler(b: Builder, node, shape, dtype=dt.f32):
    return b.emit1("full", (), TileType(static_shape(b, node, shape), dtype_arg(b, node, dtype)),
                   {"shape": static_shape(b, node, shape), "value": 0, "dtype": dtype_arg(b, node, dtype)})


def full_handler(b: Builder, node, shape, value, dtype=dt.f32):
    shape, dtype = static_shape(b, node, shape), dtype_arg(b, node, dtype)
    if isinstance(value, PY_SCALARS):
        return b.emit1("full", (), TileType(shape, dtype), {"shape": shape, "value": value, "dtype": dtype})
    v = tile(b, node, value, "fill value")
    if v.shape != ():
        raise b.error(node, "the fill value of ts.full must be a scalar")
    return b.broadcast(b.cast(v, dtype), shape, materialize=True)


def arange_handler(b: Builder, node, start, stop=None):
    if stop is None:
        start, stop = 0, start
    start, stop = static_int(b, node, start, "start"), static_int(b, node, stop, "stop")
    n = stop - start
    if not rules.is_power_of_two(n):
        raise b.error(node, f"ts.arange({start}, {stop}) has length {n}, which is not a power of two",
                      help="tiles have power-of-two shapes; mask the extra elements with ts.where")
    return b.emit1("arange", (), TileType((n,), dt.i32), {"start": start, "stop": stop})


# --- elementwise -----------------------------------------------------------------------------
def _unary(op):
    def handler(b: Builder, node, x):
        if isinstance(x, PY_SCALARS) and op == "abs":
            return builtins.abs(x)
        return b.unary(op, tile(b, node, x))
    return handler


for _name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "erf",
              "abs", "floor", "ceil"):
    register(getattr(stubs, _name))(_unary(_name))


@register(stubs.where)
def _where(b: Builder, node, cond, a, b_):
    return b.where(cond, a, b_)


@register(stubs.maximum)
def _maximum(b: Builder, node, a, b_):
    return b.binary("max", a, b_)


@register(stubs.minimum)
def _minimum(b: Builder, node, a, b_):
    return b.binary("min", a, b_)


@register(stubs.fma)
def _fma(b: Builder, node, a, b_, c):
    x, y, dtype = b.unify(a, b_)
    x, z, dtype = b.unify(x, c)
    if not dtype.is_float:
        raise b.error(node, "ts.fma needs float tiles")
    # unify leaves scalar operands unbroadcast: give all three the common shape.
    shape = rules.broadcast_shapes(rules.broadcast_shapes(x.shape, y.shape), z.shape)
    x, y, z = (b.broadcast(b.cast(v, dtype), shape) for v in (x, y, z))
    return b.emit1("fma", (x, y, z), TileType(shape, dtype))


@register(stubs.astype)
def astype(b: Builder, node, x, dtype):
    dtype = dtype_arg(b, node, dtype)
    if isinstance(x, PY_SCALARS):
        return b.const(x, dtype)
    return b.cast(tile(b, node, x), dtype)


# --- reductions ------------------------------------------------------------------------------
def _reduction(op):
    def handler(b: Builder, node, x, axis=None, keepdims=False):
        if op in ("max", "min") and isinstance(x, (tuple, *PY_SCALARS)):
            raise b.error(node, f"ts.{op} reduces a tile; use the builtin {op}(a, b) for numbers "
                                f"and ts.{'maximum' if op == 'max' else 'minimum'} for two tiles")
        v = tile(b, node, x)
        if v.shape == ():
            raise b.error(node, f"ts.{op} needs a tile with at least one axis")
        if axis is None:
            if op in ("argmax", "argmin"):
                raise b.error(node, f"ts.{op} needs an axis")
            if len(v.shape) > 1:
                n = math.prod(v.shape)
                v = b.emit1("reshape", (v,), TileType((n,), v.dtype), {"shape": (n,)})
            out = _reduce(b, node, op, v, 0, False)
            return b.emit1("reshape", (out,), TileType((1,) * len(x.shape), out.dtype),
                           {"shape": (1,) * len(x.shape)}) if keepdims else out
        return _reduce(b, node, op, v, axis_arg(b, node, axis, len(v.shape)), bool(keepdims))
    return handler


def _reduce(b: Builder, node, op, v: Value, axis: int, keepdims: bool) -> Value:
    shape = list(v.shape)
    if keepdims:
        shape[axis] = 1
    else:
        shape.pop(axis)
    dtype = v.dtype
    if op == "sum" and (dtype.is_bool or (dtype.is_int and dtype.bits < 32)):
        dtype = dt.i32
    if op in ("argmax", "argmin"):
        dtype = dt.i32
    src = v if op not in ("sum",) or dtype == v.dtype else b.cast(v, dtype)
    return b.emit1("reduce", (src,), TileType(tuple(shape), dtype), {"op": op, "axis": axis, "keepdims": keepdims})


for _name in ("sum", "max", "min"):
    register(getattr(stubs, _name))(_reduction(_name))
register(stubs.argmax)(_reduction("argmax"))
register(stubs.argmin)(_reduction("argmin"))


@register(stubs.cumsum)
def _cumsum(b: Builder, node, x, axis=0):
    v = tile(b, node, x)
    axis = axis_arg(b, node, axis, len(v.shape))
    dtype = dt.i32 if (v.dtype.is_bool or (v.dtype.is_int and v.dtype.bits < 32)) else v.dtype
    return b.emit1("cumsum", (b.cast(v, dtype),), TileType(v.shape, dtype), {"axis": axis})


# --- matrix multiply ----------------------------------------------------------------------------
@register(stubs.mma)
def mma(b: Builder, node, a, b_, acc, precision=None):
    a, b_, acc = tile(b, node, a, "left operand"), tile(b, node, b_, "right operand"), tile(b, node, acc, "accumulator")
    if len(a.shape) not in (2, 3) or len(b_.shape) != len(a.shape):
        raise b.error(node, f"ts.mma multiplies 2-D (or batched 3-D) tiles, got {a.type} and {b_.type}")
    if a.shape[-1] != b_.shape[-2]:
        raise b.error(node, f"inner dimensions differ: {a.type} @ {b_.type} ({a.shape[-1]} != {b_.shape[-2]})",
                      help="the left tile's last axis must equal the right tile's first axis")
    if a.shape[:-2] != b_.shape[:-2]:
        raise b.error(node, f"batch dimensions differ: {a.type} @ {b_.type}")
    out_shape = a.shape[:-1] + (b_.shape[-1],)
    if acc.shape != out_shape:
        raise b.error(node, f"the accumulator is {acc.type}, but {a.type} @ {b_.type} is {out_shape}")
    if a.dtype != b_.dtype:
        raise b.error(node, f"ts.mma operands must have one dtype, got {a.dtype.name} and {b_.dtype.name}",
                      help="convert one with ts.astype")
    for n in a.shape[-2:] + b_.shape[-1:]:
        if n < 16:
            raise b.error(node, f"ts.mma tiles need every dimension >= 16 (tensor cores), got {a.type} @ {b_.type}")
    _check_mma_dtypes(b, node, a.dtype, acc.dtype)
    if precision not in (None, "ieee", "tf32"):
        raise b.error(node, f"precision must be \"ieee\" or \"tf32\", got {precision!r}")
    if precision == "tf32" and a.dtype != dt.f32:
        raise b.error(node, "precision=\"tf32\" applies to f32 operands only")
    return b.emit1("mma", (a, b_, acc), acc.type, {"precision": precision or "ieee"})


def _check_mma_dtypes(b, node, ab: DType, acc: DType):
    allowed = {dt.f32: (dt.f32,), dt.bf16: (dt.f32,), dt.f16: (dt.f32, dt.f16),
               dt.f8e4m3fn: (dt.f32,), dt.f8e5m2: (dt.f32,), dt.i8: (dt.i32,)}
    if ab not in allowed:
        raise b.error(node, f"ts.mma does not take {ab.name} operands",
                      help="use f32, bf16, f16, fp8 or i8 tiles")
    if acc not in allowed[ab]:
        raise b.error(node, f"a {ab.name} ts.mma accumulates in {' or '.join(d.name for d in allowed[ab])}, "
                            f"not {acc.name}", help="initialise the accumulator with that dtype")


@register(stubs.dot)
def _dot(b: Builder, node, a, b_, precision=None):
    return matmul(b, node, a, b_, precision)


def matmul(b: Builder, node, a, b_, precision=None):
    a, b_ = tile(b, node, a, "left operand"), tile(b, node, b_, "right operand")
    if len(a.shape) < 2 or len(b_.shape) < 2:
        raise b.error(node, f"ts.dot multiplies tiles of rank >= 2, got {a.type} and {b_.type}")
    acc_dtype = dt.i32 if a.dtype == dt.i8 else dt.f32
    shape = a.shape[:-1] + (b_.shape[-1],)
    acc = b.emit1("full", (), TileType(shape, acc_dtype), {"shape": shape, "value": 0, "dtype": acc_dtype})
    return mma(b, node, a, b_, acc, precision)


# --- shapes ------------------------------------------------------------------------------------
@register(stubs.reshape)
def reshape(b: Builder, node, x, shape):
    v = tile(b, node, x)
    shape = static_shape(b, node, shape) if shape != () else ()
    if math.prod(shape) != math.prod(v.shape):
        raise b.error(node, f"cannot reshape {v.type} ({math.prod(v.shape)} elements) to {shape}")
    return b.emit1("reshape", (v,), TileType(shape, v.dtype), {"shape": shape})


@register(stubs.permute)
def permute(b: Builder, node, x, dims):
    v = tile(b, node, x)
    dims = tuple(dims) if isinstance(dims, tuple) else (dims,)
    if sorted(dims) != list(range(len(v.shape))):
        raise b.error(node, f"dims {dims} is not a permutation of the {len(v.shape)} axes of {v.type}")
    shape = tuple(v.shape[d] for d in dims)
    return b.emit1("permute", (v,), TileType(shape, v.dtype), {"dims": dims})


@register(stubs.transpose)
def transpose(b: Builder, node, x, dims=None):
    v = tile(b, node, x)
    if dims is None:
        if len(v.shape) != 2:
            raise b.error(node, f"ts.transpose without dims needs a 2-D tile, got {v.type}")
        dims = (1, 0)
    return permute(b, node, v, dims)


@register(stubs.broadcast_to)
def broadcast_to(b: Builder, node, x, shape):
    v = tile(b, node, x)
    shape = tuple(shape) if isinstance(shape, tuple) else (shape,)
    try:
        if rules.broadcast_shapes(v.shape, shape) != shape:
            raise rules.TypingError(f"cannot broadcast {v.type} to {shape}")
    except rules.TypingError as e:
        raise b.error(node, str(e), e.help) from None
    return b.broadcast(v, shape, materialize=True)


@register(stubs.expand_dims)
def expand_dims(b: Builder, node, x, axis):
    v = tile(b, node, x)
    axis = static_int(b, node, axis, "axis")
    rank = len(v.shape) + 1
    if not -rank <= axis < rank:
        raise b.error(node, f"axis {axis} is out of range for expanding a rank-{len(v.shape)} tile")
    shape = list(v.shape)
    shape.insert(axis % rank, 1)
    return b.emit1("reshape", (v,), TileType(tuple(shape), v.dtype), {"shape": tuple(shape)})


@register(stubs.join)
def _join(b: Builder, node, a, b_):
    x, y = tile(b, node, a), tile(b, node, b_)
    if x.type != y.type:
        raise b.error(node, f"ts.join needs two tiles of one shape and dtype, got {x.type} and {y.type}")
    return b.emit1("join", (x, y), TileType(x.shape + (2,), x.dtype))


@register(stubs.scalar)
def _scalar(b: Builder, node, x):
    v = tile(b, node, x)
    if math.prod(v.shape) != 1:
        raise b.error(node, f"ts.scalar needs a one-element tile, got {v.type}")
    return b.emit1("reshape", (v,), TileType((), v.dtype), {"shape": ()}) if v.shape else v


# --- compile-time and debugging ------------------------------------------------------------------
@register(stubs.static_assert)
def _static_assert(b: Builder, node, cond, msg=""):
    if isinstance(cond, Value):
        raise b.error(node, "ts.static_assert needs a compile-time condition, got a runtime value",
                      help="use kernel preconditions for runtime facts")
    if not cond:
        raise b.error(node, f"static assertion failed{': ' + msg if msg else ''}",
                      help="it is checked when the kernel is specialized for a launch's Const values and shapes: "
                           "pass arguments that satisfy it, or change the condition")
    return None


@register(stubs.print, builtins.print)
def _print(b: Builder, node, fmt, *values):
    if not isinstance(fmt, str):
        values, fmt = (fmt, *values), ""
    vals = tuple(tile(b, node, v, "printed value") for v in values)
    b.emit("print", vals, (), {"fmt": fmt})
    return None


# --- builtins on compile-time values -------------------------------------------------------------
@register(builtins.min)
def _py_min(b: Builder, node, *args):
    return _py_minmax(b, node, "min", args)


@register(builtins.max)
def _py_max(b: Builder, node, *args):
    return _py_minmax(b, node, "max", args)


def _py_minmax(b, node, op, args):
    if len(args) == 1 and isinstance(args[0], tuple):
        args = args[0]
    if not args:
        raise b.error(node, f"{op}() needs arguments")
    acc = args[0]
    for x in args[1:]:
        acc = b.binary(op, acc, x)
    return acc


@register(builtins.len)
def _py_len(b: Builder, node, obj):
    if isinstance(obj, tuple):
        return len(obj)
    raise b.error(node, f"len() works on compile-time tuples, not {describe(obj)}")


def _convert(kind, dtype):
    def handler(b: Builder, node, x=0):
        if isinstance(x, (*PY_SCALARS, str)):
            return kind(x)
        return b.cast(tile(b, node, x), dtype)
    return handler


REGISTRY[builtins.int] = _convert(int, dt.i32)
REGISTRY[builtins.float] = _convert(float, dt.f32)
REGISTRY[builtins.bool] = _convert(bool, dt.bool_)


@register(builtins.abs)
def _py_abs(b: Builder, node, x):
    return builtins.abs(x) if isinstance(x, PY_SCALARS) else b.unary("abs", tile(b, node, x))


@register(builtins.tuple)
def _py_tuple(b: Builder, node, x=()):
    if isinstance(x, tuple):
        return x
    raise b.error(node, "tuple() takes a compile-time tuple")


@register(builtins.isinstance)
def _py_isinstance(b: Builder, node, obj, cls):
    return builtins.isinstance(obj, cls)


def _sig(text):
    params = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("*"):
            params.append(inspect.Parameter(part[1:], inspect.Parameter.VAR_POSITIONAL))
        elif "=" in part:
            k, v = part.split("=")
            params.append(inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=eval(v)))
        else:
            params.append(inspect.Parameter(part, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    return inspect.Signature(params)


# Signatures as the frontend binds them (names with a trailing _ avoid clashing with `b`).
SIGNATURES = {
    stubs.where: _sig("cond, a, b_"), stubs.maximum: _sig("a, b_"), stubs.minimum: _sig("a, b_"),
    stubs.fma: _sig("a, b_, c"), stubs.mma: _sig("a, b_, acc, precision=None"),
    stubs.dot: _sig("a, b_, precision=None"), stubs.join: _sig("a, b_"),
    builtins.min: _sig("*args"), builtins.max: _sig("*args"), builtins.len: _sig("obj"),
    builtins.int: _sig("x=0"), builtins.float: _sig("x=0"), builtins.bool: _sig("x=0"),
    builtins.abs: _sig("x"), builtins.tuple: _sig("x=()"), builtins.isinstance: _sig("obj, cls"),
    builtins.print: _sig("fmt, *values"),
}
