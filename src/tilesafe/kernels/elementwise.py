"""Elementwise kernels: `add, sub, mul, div` (NumPy broadcasting), `neg, exp, silu, gelu,
relu`, `residual_add` and `silu_mul`.

Every call is shown to one rank-3 kernel (see `layout.py`): contiguous operands merge into
a single long axis, a broadcast operand is a stride-0 view, and a strided `out=` is written
through its strides. Math runs in fp32 and rounds once to the output dtype, as torch does
for half types. `out=` may be either operand itself, or both (`_kernel_for`: in-place
kernels read it back as their own tile); any other overlap is refused by `call_checks`.
"""

import tilesafe as ts

from ..backends.triton import targets
from . import arguments as A
from . import configs, layout
from .call_checks import check_aliasing
from .call_plans import PlanCache, layout_of, planned
from .launch import launch, pow2

# Compile-time op codes (module-level ints are constants inside kernels).
ADD, SUB, MUL, DIV, SILU_MUL, RSUB, RDIV, RSILU_MUL = 0, 1, 2, 3, 4, 5, 6, 7
NEG, EXP, SILU, GELU, RELU = 0, 1, 2, 3, 4
GELU_C = 0.7978845608028654          # sqrt(2 / pi)


@ts.function
def binary_op(a, b, OP):
    """fp32 tiles in, fp32 out."""
    if OP == ADD:
        r = a + b
    elif OP == SUB:
        r = a - b
    elif OP == MUL:
        r = a * b
    elif OP == DIV:
        r = a / b
    elif OP == RSUB:
        r = b - a
    elif OP == RDIV:
        r = b / a
    elif OP == SILU_MUL:
        r = a * ts.sigmoid(a) * b                           # silu(a) * b
    else:
        r = b * ts.sigmoid(b) * a                           # RSILU_MUL: silu(b) * a
    return r


@ts.function
def unary_op(a, OP):
    """fp32 tile in, fp32 out."""
    if OP == NEG:
        r = -a
    elif OP == EXP:
        r = ts.exp(a)
    elif OP == SILU:
        r = a * ts.sigmoid(a)
    elif OP == GELU:
        r = 0.5 * a * (1.0 + ts.tanh(GELU_C * (a + 0.044715 * a * a * a)))
    else:
        r = ts.maximum(a, 0.0)
    return r


@ts.kernel
def binary_kernel(z: ts.Mut["T", ("B0", "B1", "B2")], x: ts.Ref["T", ("N0", "N1", "N2")],
                  y: ts.Ref["T", ("N0", "N1", "N2")], T: ts.Const[ts.DType], OP: ts.Const[int],
                  B0: ts.Const[int], B1: ts.Const[int], B2: ts.Const[int], N0: int, N1: int, N2: int):
    a = ts.load_tile_like(x, z).astype(ts.f32)             # (B0, B1, B2)
    b = ts.load_tile_like(y, z).astype(ts.f32)             # (B0, B1, B2), stride 0 where broadcast
    z.store(binary_op(a, b, OP).astype(T))


@ts.kernel
def scalar_kernel(z: ts.Mut["T", ("B0", "B1", "B2")], x: ts.Ref["T", ("N0", "N1", "N2")], s: float,
                  T: ts.Const[ts.DType], OP: ts.Const[int], B0: ts.Const[int], B1: ts.Const[int],
                  B2: ts.Const[int], N0: int, N1: int, N2: int):
    a = ts.load_tile_like(x, z).astype(ts.f32)             # (B0, B1, B2)
    z.store(binary_op(a, s, OP).astype(T))


@ts.kernel
def unary_kernel(z: ts.Mut["T", ("B0", "B1", "B2")], x: ts.Ref["T", ("N0", "N1", "N2")],
                 T: ts.Const[ts.DType], OP: ts.Const[int], B0: ts.Const[int], B1: ts.Const[int],
                 B2: ts.Const[int], N0: int, N1: int, N2: int):
    a = ts.load_tile_like(x, z).astype(ts.f32)             # (B0, B1, B2)
    z.store(unary_op(a, OP).astype(T))


@ts.kernel
def binary_inplace_kernel(z: ts.Mut["T", ("B0", "B1", "B2")], y: ts.Ref["T", ("N0", "N1", "N2")],
                          T: ts.Const[ts.DType], OP: ts.Const[int], B0: ts.Const[int], B1: ts.Const[int],
                          B2: ts.Const[int], N0: int, N1: int, N2: int):
    """`z = z OP y`: a block reads back the tile it owns, so updating in place is race-free."""
    a = z.load().astype(ts.f32)                             # (B0, B1, B2)
    b = ts.load_tile_like(y, z).astype(ts.f32)             # (B0, B1, B2)
    z.store(binary_op(a, b, OP).astype(T))


@ts.kernel
def binary_self_kernel(z: ts.Mut["T", ("B0", "B1", "B2")], T: ts.Const[ts.DType], OP: ts.Const[int],
                       B0: ts.Const[int], B1: ts.Const[int], B2: ts.Const[int]):
    """`z = z OP z` (`add(x, x, out=x)`): both operands are the block's own tile, read back."""
    a = z.load().astype(ts.f32)                             # (B0, B1, B2)
    z.store(binary_op(a, a, OP).astype(T))


@ts.kernel
def unary_inplace_kernel(z: ts.Mut["T", ("B0", "B1", "B2")], s: float, T: ts.Const[ts.DType], OP: ts.Const[int],
                         SCALAR: ts.Const[bool], B0: ts.Const[int], B1: ts.Const[int], B2: ts.Const[int]):
    """`z = op(z)`, or `z = z OP s` for a scalar s when SCALAR."""
    a = z.load().astype(ts.f32)                             # (B0, B1, B2)
    if SCALAR:
        r = binary_op(a, s, OP)
    else:
        r = unary_op(a, OP)
    z.store(r.astype(T))


def tile3(shape, budget: int) -> tuple[int, int, int]:
    """A power-of-two tile of at most `budget` elements, filled from the innermost axis."""
    c = min(pow2(shape[2]), budget)
    b = min(pow2(shape[1]), max(1, budget // c))
    a = min(pow2(shape[0]), max(1, budget // (c * b)))
    return a, b, c


# --- public API -------------------------------------------------------------------------


def add(x, y, out=None, config=None):
    """`x + y` with NumPy broadcasting (f32, f16, bf16). `ts.kernels.add(x, bias_row)`"""
    return _binary("add", ADD, x, y, out, config)


def sub(x, y, out=None, config=None):
    """`x - y` with NumPy broadcasting."""
    return _binary("sub", SUB, x, y, out, config)


def mul(x, y, out=None, config=None):
    """`x * y` with NumPy broadcasting."""
    return _binary("mul", MUL, x, y, out, config)


def div(x, y, out=None, config=None):
    """`x / y` with NumPy broadcasting."""
    return _binary("div", DIV, x, y, out, config)


def residual_add(x, r, out=None, config=None):
    """`x + r` for two tensors of one shape (the transformer residual stream)."""
    return _binary("residual_add", ADD, x, r, out, config, broadcast=False, names=("x", "r"))


def silu_mul(gate, up, out=None, config=None):
    """`silu(gate) * up` for two tensors of one shape (the SwiGLU MLP); views of one packed
    gate/up tensor work as they are."""
    return _binary("silu_mul", SILU_MUL, gate, up, out, config, broadcast=False, names=("gate", "up"))


def neg(x, out=None, config=None):
    """`-x`."""
    return _unary("neg", NEG, x, out, config)


def exp(x, out=None, config=None):
    """`e**x`."""
    return _unary("exp", EXP, x, out, config)


def silu(x, out=None, config=None):
    """`x * sigmoid(x)`."""
    return _unary("silu", SILU, x, out, config)


def gelu(x, out=None, config=None):
    """GELU, tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`."""
    return _unary("gelu", GELU, x, out, config)


def relu(x, out=None, config=None):
    """`max(x, 0)`."""
    return _unary("relu", RELU, x, out, config)


# --- dispatch -----------------------------------------------------------------------------

_NUMBERS = (int, float)
_SWAPPED = {ADD: ADD, MUL: MUL, SUB: RSUB, DIV: RDIV, SILU_MUL: RSILU_MUL}   # a OP b == b SWAPPED a
XY = ("x", "y")


def _binary(fn: str, op: int, x, y, out, config, broadcast: bool = True, names=XY):
    x_num, y_num = isinstance(x, _NUMBERS) and broadcast, isinstance(y, _NUMBERS) and broadcast
    if x_num and y_num:
        raise A.fail(fn, "needs at least one tensor operand", help="compute with Python numbers directly")
    if x_num or y_num:
        t, s, op, name = (y, x, _SWAPPED[op], names[1]) if x_num else (x, y, op, names[0])
        return _elementwise(fn, dict(OP=op, s=float(s)), t, None, out, config, scalar=True, names=(name,))
    return _elementwise(fn, dict(OP=op), x, y, out, config, broadcast, names=names)


def _unary(fn: str, op: int, x, out, config):
    return _elementwise(fn, dict(OP=op), x, None, out, config)


def _elementwise(fn, extra, x, y, out, config, broadcast=True, scalar=False, names=XY):
    if not scalar and config is None:      # tensors only: a call plan's fast form (call_hits.py)
        return _tensor_operands(fn, extra["OP"], x, y, out, broadcast, names)
    return _elementwise_full(fn, extra, x, y, out, config, broadcast, scalar, names)


@planned
def _tensor_operands(fn, op, x, y, out, broadcast, names):
    """An elementwise call on tensors. Planned by layout (call_plans.py); a scalar operand's
    value is a runtime scalar of its kernel, so those calls keep the layout plans below."""
    return _elementwise_full(fn, dict(OP=op), x, y, out, None, broadcast, False, names)


def _elementwise_full(fn, extra, x, y, out, config, broadcast=True, scalar=False, names=XY):
    torch_mode = A.is_torch(x)
    key = _plan_key(fn, extra, x, y, out, config, broadcast, torch_mode)
    plan = _PLANS.get(key)
    xt = A.tensor(x, names[0], fn)
    operands = {names[0]: xt}
    if y is not None:
        operands[names[1]] = xt if y is x else A.tensor(y, names[1], fn)
    if plan is not None:
        return plan.call(fn, operands, out, torch_mode, extra)
    dtype = A.dtype_in(xt, A.FLOATS, names[0], fn)
    if y is not None:
        A.same_dtype(fn, **operands)
    device = A.same_device(fn, **operands)
    shape = _result_shape(fn, operands, broadcast)
    o = A.output(out, shape, dtype, device, torch_mode, fn)
    # The whole call, before any launch: `out` may be an operand itself (the same view: each
    # output element depends only on the operands' elements at its own index), nothing else.
    check_aliasing(fn, operands, {"out": o.passed}, {"out": tuple(operands)})
    if o.tensor.numel == 0:
        return o.returned
    kernel, args, extra = _kernel_for(o.passed, list(operands.values()), extra, scalar)
    expanded = [layout.broadcast(t, shape) for t in args.values()]
    views = layout.rank3([o.tensor, *expanded], shape)
    # Layouts that do not merge into 3 axes run one launch per slab of the outer axes.
    slabs = [views] if views is not None else layout.slabs3([o.tensor, *expanded], shape)
    cfg = configs.lookup("elementwise", configs.shape_class(dtype), config, dtype)
    for views in slabs:
        tile = tile3(views[0].shape, cfg["block"])
        launch(kernel, {"z": (views[0], tile)}, cfg=cfg, **dict(zip(args, views[1:])), **extra)
    if len(slabs) == 1:
        _PLANS.put(key, _Plan(shape, dtype, device, kernel, list(args), extra, views, tile, cfg))
    return o.returned


# --- plans: what a call of one argument layout decides, kept for the next (call_plans.py) ------

_PLANS = PlanCache()


def _plan_key(fn, extra, x, y, out, config, broadcast, torch_mode):
    """The layout a call's decisions depend on; None for a call that takes the full path."""
    if config is not None:
        return None
    lx = layout_of(x)
    ly = layout_of(y) if y is not None else None
    if lx is None or (y is not None and ly is None):
        return None
    if out is None:
        where = None
    else:
        lo = layout_of(out)
        if lo is None:
            return None
        # Which operands `out` is the very same view of picks the in-place kernel.
        where = (lo, layout.same_view(out, x), y is not None and layout.same_view(out, y))
    # A scalar operand's value is the launch's runtime scalar: not part of the layout.
    ops = tuple((k, v) for k, v in extra.items() if k != "s")
    # The config comes from the backend and the compile target too (CPU defaults, a GPU's).
    return (fn, ops, lx, ly, y is x, where, broadcast, torch_mode, configs.current_backend(),
            targets.compile_target())


class _Plan:
    """One layout's result shape, dtype, device, kernel, views (shape and strides of each
    tensor at rank 3), tile and config."""
    __slots__ = ("shape", "dtype", "device", "kernel", "args", "extra", "geometry", "tile", "cfg")

    def __init__(self, shape, dtype, device, kernel, args, extra, views, tile, cfg):
        self.shape, self.dtype, self.device, self.kernel = shape, dtype, device, kernel
        self.args, self.extra, self.tile, self.cfg = args, extra, tile, cfg
        self.geometry = [(tuple(v._t.shape), v._t.stride()) for v in views]

    def call(self, fn, operands, out, torch_mode, given):
        o = A.output(out, self.shape, self.dtype, self.device, torch_mode, fn)
        check_aliasing(fn, operands, {"out": o.passed}, {"out": tuple(operands)})
        ts_ = list(operands.values())
        # The kernel's tensor arguments, in the order the first call found them.
        sources = [o.tensor, *(_source(self.kernel, a, ts_, o.passed) for a in self.args)]
        views = [layout.strided(t, shp, st) for t, (shp, st) in zip(sources, self.geometry)]
        extra = self.extra if "s" not in given else dict(self.extra, s=given["s"])
        launch(self.kernel, {"z": (views[0], self.tile)}, cfg=self.cfg, **dict(zip(self.args, views[1:])), **extra)
        return o.returned


def _source(kernel, name, operands, out):
    """Which operand feeds the kernel's tensor parameter `name` (see `_kernel_for`)."""
    if kernel is binary_inplace_kernel:       # y is the operand that is not `out`
        x, y = operands[0], operands[1]
        return y if layout.same_view(out, x) else x
    return operands[0] if name == "x" else operands[1]


def _kernel_for(out, operands, extra, scalar):
    """(kernel, its tensor arguments by parameter name, its other arguments) for `out = op(operands)`;
    `out` is None when the call allocated it (fresh memory: no operand is it).

    When `out` is an operand itself (the same view) the kernel takes it only as the `ts.Mut`
    and reads it back with `z.load()`: a block reads exactly the tile it then overwrites, so
    no block reads what another writes, and the launch's own alias check (S7) sees no
    overlap. An `out` that overlaps an operand in any other way never gets here."""
    x, y = operands[0], operands[1] if len(operands) > 1 else None
    on_x = out is not None and layout.same_view(out, x)
    on_y = out is not None and y is not None and layout.same_view(out, y)
    if y is None:
        if on_x:
            return unary_inplace_kernel, {}, dict(extra, SCALAR=scalar, s=extra.get("s", 0.0))
        return (scalar_kernel if scalar else unary_kernel), {"x": x}, extra
    if on_x and on_y:                     # add(x, x, out=x)
        return binary_self_kernel, {}, extra
    if on_x:                              # out = out OP y
        return binary_inplace_kernel, {"y": y}, extra
    if on_y:                              # out = x OP out, i.e. out SWAPPED x
        return binary_inplace_kernel, {"y": x}, dict(extra, OP=_SWAPPED[extra["OP"]])
    return binary_kernel, {"x": x, "y": y}, extra


def _result_shape(fn, operands: dict, broadcast: bool) -> tuple[int, ...]:
    shapes = [t.shape for t in operands.values()]
    if len(shapes) == 1:
        return shapes[0]
    if not broadcast:
        if len(set(shapes)) > 1:
            raise A.fail(fn, f"the operands have shapes {shapes[0]} and {shapes[1]}; this function "
                             "takes equal shapes", help="use ts.kernels.add / mul for broadcasting")
        return shapes[0]
    out = []
    for a, b in zip(*((1,) * (max(map(len, shapes)) - len(sh)) + tuple(sh) for sh in shapes)):
        if a != b and 1 not in (a, b):
            raise A.fail(fn, f"shapes {shapes[0]} and {shapes[1]} do not broadcast",
                         help="axes must be equal, or 1 on one side (NumPy rules)")
        out.append(b if a == 1 else a)
    return tuple(out)
