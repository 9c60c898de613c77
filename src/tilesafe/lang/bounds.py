"""S11: where each tile access needs an in-kernel bounds mask, and the report of it.

For every load, store and gather, and every axis, the pass derives the range of the tile
index from where it comes from (a block id, a loop over `num_tiles`, a minted walk index,
a constant) and states the access's in-bounds condition as a small expression over the
launch's extents, scalars and grid. A condition with no runtime leaves is decided now
("static"); one with runtime leaves is decided by each launch ("launch": the launch picks
the maskless code when it holds); an index of unknown range keeps its mask ("kernel").

Integer model. Scalar integer arithmetic in a kernel is done in the operands' dtype (i32 for
Python ints that fit, block ids, tile counts, loop variables) and wraps, as Triton's does; the
reference interpreter computes it in NumPy's fixed-width types, so both backends agree. A tile
index `i` of a tile access then addresses the elements [i*s, (i+1)*s) computed exactly (that
product never wraps). So a range derived here is the range of the *exact* result, and holds
only under side conditions: every +, - and * on the way stays inside its dtype, as do the signs
some rules assume. Each range carries these conditions and every launch proof includes them
(evaluated in Python ints at launch, like the rest of the proof); a launch that breaks one gets
the masked code. A masked access whose index range does not prove that i*s and i*s + s - 1 fit
in 32 bits gets a guard besides its mask (`GUARD`): 0 <= i <= (n - 1) // s, the exact "tile i
overlaps the tensor" without the product, so a wrapped product is never dereferenced.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import Loc
from .conditions import compile_condition, evaluate
from .ir import Function, Op, TensorType, Value, walk

STATIC, LAUNCH, KERNEL = "static", "launch", "kernel"
ACCESS_OPS = ("load", "store", "gather", "scatter", "valid", "prefetch")
# Per-axis flags of `masks_for`: False (no mask), True (mask the elements), GUARD (mask them and
# also check the tile index itself: its element offsets might wrap in 32 bits).
GUARD = 2
I32_MIN, I32_MAX = -2**31, 2**31 - 1


@dataclass(frozen=True)
class AxisCheck:
    axis: int
    status: str             # STATIC / LAUNCH / KERNEL
    condition: tuple | None  # for LAUNCH: an expression that must be true for no mask
    fits: tuple | bool = True  # when masked: the element offsets cannot wrap in 32 bits (else GUARD)
    test: Callable | None = None        # compile_condition(condition)
    fits_test: Callable | None = None   # compile_condition(fits), for an expression


@dataclass(frozen=True)
class AccessCheck:
    op: Op
    tensor: str
    kind: str               # "load" / "store" / "gather" / "scatter"
    loc: Loc | None
    axes: tuple[AxisCheck, ...]


def analyze(fn: Function, static_extents: dict) -> list[AccessCheck]:
    """Every access of `fn` with its per-axis status. `static_extents[(param, axis)]` = int."""
    ranges = _Ranges(fn, static_extents)
    checks = []
    for op in walk(fn.body):
        ranges.visit(op)
        if op.opcode in ACCESS_OPS and op.opcode != "valid":
            checks.append(_check(op, ranges))
    return checks


def masks_for(checks: list[AccessCheck], facts) -> dict:
    """id(op) -> per-axis flags for one launch: False (no mask), True (a mask), GUARD."""
    out = {}
    for c in checks:
        out[id(c.op)] = tuple(_flag(a, facts) for a in c.axes)
    return out


def _flag(a: AxisCheck, facts):
    if a.status == STATIC or (a.status == LAUNCH and a.test(facts)):
        return False
    if a.fits is True or (a.fits is not False and a.fits_test(facts)):
        return True
    return GUARD


@dataclass(frozen=True)
class Report:
    """What `kernel.checks(...)` returns: how each access's bounds are discharged."""
    static: int
    launch: int
    kernel: int
    accesses: tuple
    notes: tuple = ()   # `checks(..., target=)`: schedule hints that target leaves out

    def __str__(self) -> str:
        lines = [f"bounds checks: {self.static} proven statically, {self.launch} proven by launch facts, "
                 f"{self.kernel} masked in the kernel"]
        for line, what, status in self.accesses:
            lines.append(f"  line {line}: {what}: {status}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def report(checks: list[AccessCheck], facts) -> Report:
    counts = {STATIC: 0, LAUNCH: 0, KERNEL: 0}
    rows = []
    masks = masks_for(checks, facts)
    for c in checks:
        if any(masks[id(c.op)]):
            status = KERNEL
        elif all(a.status == STATIC for a in c.axes):
            status = STATIC
        else:
            status = LAUNCH
        counts[status] += 1
        rows.append((c.loc.line if c.loc else 0, f"{c.kind} {c.tensor}", status))
    return Report(counts[STATIC], counts[LAUNCH], counts[KERNEL], tuple(rows))


# --- index ranges ------------------------------------------------------------------------------
def _const(c):
    return ("const", c)


def _all(conds):
    """One expression true when every condition is; conditions without runtime leaves are
    decided now (one false: the constant False)."""
    out = None
    for c in conds:
        if _is_static(c):
            if not evaluate(c, None):
                return _const(False)
            continue
        out = c if out is None else ("and", out, c)
    return out if out is not None else _const(True)


class _Ranges:
    """Symbolic inclusive bounds [lb, ub] of integer scalars, as expressions over the launch.

    Every integer scalar lies in its dtype's range, the bounds of a value nothing else is
    known about. Tighter bounds flow through constants, parameters, extents, block ids, loop
    variables and walk indices, and through the monotone integer ops (+, -, * and // by a
    non-negative constant, min, max), so `range(K // BK)` or `range(min(a, b))` keep a proof;
    products, floor divisions and modulos of runtime values keep one under conditions each
    launch checks (operands' signs). `ok[v]` lists the conditions under which v's bounds hold,
    in order (an operand's before its result's): the signs a rule assumes, and that no +, -, *
    (or loop step) on the way wrapped in its dtype. An access whose index keeps only its
    dtype's range keeps its mask.
    """

    def __init__(self, fn: Function, static_extents: dict):
        self.lb: dict[int, tuple] = {}
        self.ub: dict[int, tuple] = {}
        self.ok: dict[int, tuple] = {}
        self.static = static_extents
        self.fn = fn
        for p in fn.params:
            if p.value is not None and not isinstance(p.value.type, TensorType) and p.value.dtype.is_int:
                self._exact(p.value, ("scalar", p.name))

    def extent(self, tensor: str, axis: int):
        if (tensor, axis) in self.static:
            return _const(self.static[(tensor, axis)])
        return ("extent", tensor, axis)

    def lo(self, v: Value):
        """v's lower bound: derived, or its dtype's least value (None for a non-integer)."""
        e = self.lb.get(id(v))
        return e if e is not None else _dtype_bound(v, _int_min)

    def hi(self, v: Value):
        e = self.ub.get(id(v))
        return e if e is not None else _dtype_bound(v, _int_max)

    def bounds(self, v: Value):
        """(lowest value, one past the highest value, the conditions they need), or None."""
        lo, hi = self.lo(v), self.hi(v)
        if lo is None or hi is None:
            return None
        return lo, _fold("add", hi, _const(1)), self.ok.get(id(v), ())

    def _exact(self, v: Value, e) -> None:
        self.lb[id(v)] = self.ub[id(v)] = e

    def _set(self, v: Value, lo, hi, ok=()) -> None:
        ok = tuple(dict.fromkeys(c for c in ok if not (_is_static(c) and evaluate(c, None))))
        if any(_is_static(c) for c in ok):   # a condition that never holds: only the dtype's range
            return
        if lo is not None:
            self.lb[id(v)] = lo
        if hi is not None:
            self.ub[id(v)] = hi
        if ok and (lo is not None or hi is not None):
            self.ok[id(v)] = ok

    def _conds(self, *vs) -> tuple:
        return tuple(c for v in vs for c in self.ok.get(id(v), ()))

    def _wrapping(self, v: Value, lo, hi, ok) -> None:
        """The result of an op that wraps in v's dtype: [lo, hi] holds only when it fits the
        dtype (a wrapped sum or product is no bound, not even a one-sided one)."""
        if lo is None or hi is None:
            return
        d = v.dtype
        self._set(v, lo, hi, ok + (("ge", lo, _const(_int_min(d))), ("le", hi, _const(_int_max(d)))))

    def visit(self, op: Op) -> None:
        code = op.opcode
        if code == "const" and op.result.dtype.is_int:
            self._exact(op.result, _const(op.attrs["value"]))
        elif code == "block_id":
            self._set(op.result, _const(0), ("add", ("grid", op.attrs["axis"]), _const(-1)))
        elif code == "extent":
            self._exact(op.result, self.extent(op.args[0].name, op.attrs["axis"]))
        elif code == "num_tiles":
            self._exact(op.result, ("cdiv", self.extent(op.args[0].name, op.attrs["axis"]), _const(op.attrs["tile"])))
        elif code == "cast" and op.args[0].dtype.is_int and op.result.dtype.is_int:
            a = op.args[0]
            lo, hi, ok = self.lo(a), self.hi(a), self._conds(a)
            if _value_preserving(a.dtype, op.result.dtype):
                self._set(op.result, lo, hi, ok)
            else:   # a narrowing or sign-changing cast keeps the value only when it fits
                self._wrapping(op.result, lo, hi, ok)
        elif code == "binary" and op.result.dtype.is_int and op.result.shape == ():
            self._binary(op)
        elif code == "for":
            self._loop(op)
        elif code == "tiles" and not op.attrs["windowed"]:
            tt = self.fn.param(op.attrs["output"]).value.type
            for a, arg in enumerate(op.regions[0].args[:op.attrs["rank"]]):
                count = ("cdiv", self.extent(op.attrs["output"], a), _const(tt.tile[a]))
                self._set(arg, _const(0), ("add", count, _const(-1)))
        elif code == "subtiles":
            for arg, t, sub in zip(op.regions[0].args, op.attrs["tile"], op.attrs["shape"]):
                self._set(arg, _const(0), _const(t // sub - 1))

    def _loop(self, op: Op) -> None:
        lo, hi, step = op.args[:3]
        step_e, iv = self.lo(step), op.regions[0].args[0]
        if not (step_e is not None and step_e == self.hi(step) and step_e[0] == "const" and step_e[1] > 0):
            return
        # lo <= iv < hi <= hi(hi): iv is at most hi(hi) - 1, as long as the last increment,
        # iv + step, cannot wrap in iv's dtype (the loop would go on with a negative iv); a
        # step of 1 never does, since hi itself fits the dtype
        hi_ub = self.hi(hi)
        ok = self._conds(lo, hi)
        if step_e[1] > 1:
            ok += (("le", _fold("add", hi_ub, _const(step_e[1] - 1)), _const(_int_max(iv.dtype))),)
        self._set(iv, self.lo(lo), _fold("add", hi_ub, _const(-1)), ok)

    def _binary(self, op: Op) -> None:
        a, b = op.args
        la, ua, lb_, ub_ = self.lo(a), self.hi(a), self.lo(b), self.hi(b)
        if None in (la, ua, lb_, ub_):
            return
        kind, r = op.attrs["op"], op.result
        const_b = lb_ if lb_ == ub_ and lb_[0] == "const" else None
        if kind == "*" and const_b is None and la == ua and la[0] == "const":
            la, ua, lb_, ub_, const_b = lb_, ub_, la, ua, la     # c * x: the same as x * c
        ok = self._conds(a, b)
        if kind == "+":
            self._wrapping(r, _fold("add", la, lb_), _fold("add", ua, ub_), ok)
        elif kind == "-":
            self._wrapping(r, _fold("sub", la, ub_), _fold("sub", ua, lb_), ok)
        elif kind == "*" and const_b is not None and const_b[1] >= 0:
            self._wrapping(r, _fold("mul", la, const_b), _fold("mul", ua, const_b), ok)
        elif kind == "*":
            # x * y of two runtime values: monotone when both are >= 0
            signs = (("ge", la, _const(0)), ("ge", lb_, _const(0)))
            self._wrapping(r, _fold("mul", la, lb_), _fold("mul", ua, ub_), ok + signs)
        elif kind == "//" and const_b is not None and const_b[1] > 0:
            self._set(r, _fold("floordiv", la, const_b), _fold("floordiv", ua, const_b), ok)
        elif kind == "//":
            # a >= 0 and b >= 1: a // b grows with a and shrinks with b
            signs = (("ge", la, _const(0)), ("ge", lb_, _const(1)))
            self._set(r, _fold("floordiv", la, ub_), _fold("floordiv", ua, lb_), ok + signs)
        elif kind == "%":
            # Python's floor modulo by b >= 1 lies in [0, b - 1], whatever a is
            self._set(r, _const(0), _fold("add", ub_, _const(-1)), self._conds(b) + (("ge", lb_, _const(1)),))
        elif kind == "min":   # at least the smaller lower bound; at most either upper bound
            self._set(r, _fold("min", la, lb_), _fold("min", ua, ub_), ok)
        elif kind == "max":   # at least either lower bound; at most the larger upper bound
            self._set(r, _fold("max", la, lb_), _fold("max", ua, ub_), ok)


def _dtype_bound(v: Value, which):
    """`which` (_int_min / _int_max) of v's dtype, for an integer scalar."""
    if isinstance(v.type, TensorType) or v.shape != () or not v.dtype.is_int:
        return None
    return _const(which(v.dtype))


def _fold(tag: str, x, y):
    """(tag, x, y), computed now when both are constants."""
    if x[0] == "const" and y[0] == "const":
        value = evaluate((tag, x, y), None)
        if value == value:   # not NaN
            return _const(value)
    return (tag, x, y)


def _int_max(d) -> int:
    """The largest value of integer dtype `d`."""
    return (1 << d.bits) - 1 if d.kind == "uint" else (1 << (d.bits - 1)) - 1


def _int_min(d) -> int:
    return 0 if d.kind == "uint" else -(1 << (d.bits - 1))


def _value_preserving(src, dst) -> bool:
    """Whether every value of int dtype `src` is the same value in int dtype `dst` (a narrowing
    or sign-changing cast wraps, so the symbolic value would no longer describe the result)."""
    if not (src.is_int and dst.is_int):
        return False
    if src.kind == dst.kind:
        return dst.bits >= src.bits
    return src.kind == "uint" and dst.kind == "int" and dst.bits > src.bits


def _check(op: Op, ranges: _Ranges) -> AccessCheck:
    tensor = op.args[0].name
    ttype = op.args[0].type
    mode = op.attrs.get("mode", "tile")
    if op.opcode == "gather":
        shape, index = op.attrs["shape"], op.args[2:]
    elif op.opcode == "scatter":                       # rows from an index tensor, then tile indices
        shape, index = op.args[1].shape, op.args[3:]
    elif op.opcode == "store":
        shape = op.args[1].shape
        index = op.args[2:]
    else:
        shape, index = op.attrs["shape"], op.args[1:]
    axes = []
    for a in range(ttype.rank):
        extent = ranges.extent(tensor, a)
        if op.opcode == "gather" and a == op.attrs["axis"] or op.opcode == "scatter" and a == 0:
            axes.append(AxisCheck(a, KERNEL, None))   # positions are compared, never multiplied
            continue
        # the block modes' offsets are below the grid's cover of the tensor (the 64-bit decision bounds it)
        fits = True
        if mode in ("block", "subtile", "member"):   # a member's tile is some block's own tile
            owner = op.attrs.get("owner", tensor)
            tile = ranges.fn.param(owner).value.type.tile[a]
            cond = ("le", ("mul", ("grid", a), _const(tile)), extent)
        elif mode == "group":                         # a MutLast tile: grid axes 1.. (S16)
            cond = ("le", ("mul", ("grid", a + 1), _const(ttype.tile[a])), extent)
        else:
            rng = ranges.bounds(index[a])
            if rng is None:
                axes.append(AxisCheck(a, KERNEL, None, fits=False))
                continue
            lo, hi, ok = rng
            s = _const(shape[a])
            cond = _all(ok + (("ge", lo, _const(0)), ("le", ("mul", hi, s), extent)))
            # the tile's element offsets [lo*s, hi*s) in 32 bits
            fits = _all(ok + (("ge", ("mul", lo, s), _const(I32_MIN)), ("le", ("mul", hi, s), _const(I32_MAX + 1))))
        axes.append(_classify(a, cond, fits))
    return AccessCheck(op, tensor, op.opcode, op.loc, tuple(axes))


def _classify(axis: int, cond, fits) -> AxisCheck:
    if fits is not True and _is_static(fits):
        fits = bool(evaluate(fits, None))
    fits_test = None if isinstance(fits, bool) else compile_condition(fits)
    if _is_static(cond):
        return AxisCheck(axis, STATIC if evaluate(cond, None) else KERNEL, None, fits, None, fits_test)
    return AxisCheck(axis, LAUNCH, cond, fits, compile_condition(cond), fits_test)


def _is_static(expr) -> bool:
    if expr[0] == "const":
        return True
    if expr[0] in ("extent", "scalar", "grid"):
        return False
    return all(_is_static(e) for e in expr[1:])
