"""S11: where each tile access needs an in-kernel bounds mask, and the report of it.

For every load, store and gather, and every axis, the pass derives the range of the tile
index from where it comes from (a block id, a loop over `num_tiles`, a minted walk index,
a constant) and states the access's in-bounds condition as a small expression over the
launch's extents, scalars and grid. A condition with no runtime leaves is decided now
("static"); one with runtime leaves is decided by each launch ("launch": the launch picks
the maskless code when it holds); an index of unknown range keeps its mask ("kernel").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import Loc
from .ir import Function, Op, TensorType, Value, walk

STATIC, LAUNCH, KERNEL = "static", "launch", "kernel"
ACCESS_OPS = ("load", "store", "gather", "valid")


@dataclass(frozen=True)
class AxisCheck:
    axis: int
    status: str             # STATIC / LAUNCH / KERNEL
    condition: tuple | None  # for LAUNCH: an expression that must be true for no mask


@dataclass(frozen=True)
class AccessCheck:
    op: Op
    tensor: str
    kind: str               # "load" / "store" / "gather"
    loc: Loc | None
    axes: tuple[AxisCheck, ...]


def analyze(fn: Function, static_extents: dict) -> list[AccessCheck]:
    """Every access of `fn` with its per-axis status. `static_extents[(param, axis)]` = int."""
    ranges = _Ranges(fn, static_extents)
    checks = []
    for op in walk(fn.body):
        ranges.visit(op)
        if op.opcode in ACCESS_OPS and op.opcode != "valid":
            checks.append(_check(op, ranges, static_extents))
    return checks


def evaluate(expr, facts) -> int | bool:
    """Evaluate a condition expression; `facts` answers extent/scalar/grid leaves."""
    tag = expr[0]
    if tag == "const":
        return expr[1]
    if tag == "extent":
        return facts.extent(expr[1], expr[2])
    if tag == "scalar":
        return facts.scalar(expr[1])
    if tag == "grid":
        return facts.grid(expr[1])
    if tag == "sel":   # ("sel", cond, if_true, if_false)
        return evaluate(expr[2], facts) if evaluate(expr[1], facts) else evaluate(expr[3], facts)
    a = evaluate(expr[1], facts)
    b = evaluate(expr[2], facts)
    if a != a or b != b:   # NaN (e.g. inf // n): unknown, and every comparison with it fails
        return math.nan
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
            "cdiv": lambda: -(-a // b), "min": lambda: min(a, b), "max": lambda: max(a, b),
            "le": lambda: a <= b, "ge": lambda: a >= b, "and": lambda: a and b}[tag]()


def masks_for(checks: list[AccessCheck], facts) -> dict:
    """id(op) -> per-axis "needs a mask" flags for one launch."""
    out = {}
    for c in checks:
        out[id(c.op)] = tuple(a.status == KERNEL or (a.status == LAUNCH and not evaluate(a.condition, facts))
                              for a in c.axes)
    return out


@dataclass(frozen=True)
class Report:
    """What `kernel.checks(...)` returns: how each access's bounds are discharged."""
    static: int
    launch: int
    kernel: int
    accesses: tuple

    def __str__(self) -> str:
        lines = [f"bounds checks: {self.static} proven statically, {self.launch} proven by launch facts, "
                 f"{self.kernel} masked in the kernel"]
        for line, what, status in self.accesses:
            lines.append(f"  line {line}: {what}: {status}")
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


class _Ranges:
    """Symbolic inclusive bounds [lb, ub] of integer scalars, as expressions over the launch.

    Bounds flow through constants, parameters, extents, block ids, loop variables and walk
    indices, and through the monotone integer ops (+, -, * and // by a non-negative constant,
    min, max), so `range(K // BK)` or `range(min(a, b))` keep a proof; products, floor
    divisions and modulos of runtime values keep one under conditions each launch checks
    (operands' signs, a product that fits its dtype). Anything else is unknown, and its
    accesses keep their masks.
    """

    def __init__(self, fn: Function, static_extents: dict):
        self.lb: dict[int, tuple] = {}
        self.ub: dict[int, tuple] = {}
        self.static = static_extents
        self.fn = fn
        for p in fn.params:
            if p.value is not None and not isinstance(p.value.type, TensorType) and p.value.dtype.is_int:
                self._exact(p.value, ("scalar", p.name))

    def extent(self, tensor: str, axis: int):
        if (tensor, axis) in self.static:
            return _const(self.static[(tensor, axis)])
        return ("extent", tensor, axis)

    def bounds(self, v: Value):
        """(lowest value, one past the highest value), or None when either is unknown."""
        lo, hi = self.lb.get(id(v)), self.ub.get(id(v))
        if lo is None or hi is None:
            return None
        return lo, ("add", hi, _const(1))

    def _exact(self, v: Value, e) -> None:
        self.lb[id(v)] = self.ub[id(v)] = e

    def _set(self, v: Value, lo, hi) -> None:
        if lo is not None:
            self.lb[id(v)] = lo
        if hi is not None:
            self.ub[id(v)] = hi

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
        elif code == "cast" and _value_preserving(op.args[0].dtype, op.result.dtype):
            self._set(op.result, self.lb.get(id(op.args[0])), self.ub.get(id(op.args[0])))
        elif code == "binary" and op.result.dtype.is_int and op.result.shape == ():
            self._binary(op)
        elif code == "for":
            lo, hi, step = op.args[:3]
            step_e = self.lb.get(id(step))
            if step_e is not None and step_e == self.ub.get(id(step)) and step_e[0] == "const" and step_e[1] > 0:
                # lo <= iv < hi <= ub(hi): iv is at most ub(hi) - 1
                hi_ub = self.ub.get(id(hi))
                self._set(op.regions[0].args[0], self.lb.get(id(lo)),
                          ("add", hi_ub, _const(-1)) if hi_ub is not None else None)
        elif code == "tiles" and not op.attrs["windowed"]:
            tt = self.fn.param(op.attrs["output"]).value.type
            for a, arg in enumerate(op.regions[0].args[:op.attrs["rank"]]):
                count = ("cdiv", self.extent(op.attrs["output"], a), _const(tt.tile[a]))
                self._set(arg, _const(0), ("add", count, _const(-1)))
        elif code == "subtiles":
            for arg, t, sub in zip(op.regions[0].args, op.attrs["tile"], op.attrs["shape"]):
                self._set(arg, _const(0), _const(t // sub - 1))

    def _binary(self, op: Op) -> None:
        a, b = op.args
        la, ua, lb_, ub_ = self.lb.get(id(a)), self.ub.get(id(a)), self.lb.get(id(b)), self.ub.get(id(b))
        kind = op.attrs["op"]
        both = lambda x, y, tag: (tag, x, y) if x is not None and y is not None else None   # noqa: E731
        const_b = lb_ if lb_ is not None and lb_ == ub_ and lb_[0] == "const" else None
        if kind == "*" and const_b is None and la is not None and la == ua and la[0] == "const":
            la, ua, lb_, ub_, const_b = lb_, ub_, la, ua, la     # c * x: the same as x * c
        if kind == "+":
            self._set(op.result, both(la, lb_, "add"), both(ua, ub_, "add"))
        elif kind == "-":
            self._set(op.result, both(la, ub_, "sub"), both(ua, lb_, "sub"))
        elif kind == "*" and const_b is not None and const_b[1] >= 0:
            self._set(op.result, both(la, const_b, "mul"), both(ua, const_b, "mul"))
        elif kind == "*" and None not in (la, ua, lb_, ub_):
            # x * y of two runtime values: monotone when both are >= 0, and only a proof when
            # the largest product fits the result's dtype (a wrapped product is no bound)
            top = ("mul", ua, ub_)
            ok = ("and", ("and", ("ge", la, _const(0)), ("ge", lb_, _const(0))),
                  ("le", top, _const(_int_max(op.result.dtype))))
            self._set(op.result, ("sel", ok, ("mul", la, lb_), _const(-math.inf)), ("sel", ok, top, _const(math.inf)))
        elif kind == "//" and const_b is not None and const_b[1] > 0:
            self._set(op.result, both(la, const_b, "floordiv"), both(ua, const_b, "floordiv"))
        elif kind == "//" and None not in (la, ua, lb_):
            # a >= 0 and b >= 1: a // b grows with a and shrinks with b
            ok = ("and", ("ge", la, _const(0)), ("ge", lb_, _const(1)))
            low = ("floordiv", la, ub_) if ub_ is not None else _const(0)
            self._set(op.result, ("sel", ok, low, _const(-math.inf)),
                      ("sel", ok, ("floordiv", ua, lb_), _const(math.inf)))
        elif kind == "%" and lb_ is not None and ub_ is not None:
            # Python's floor modulo by b >= 1 lies in [0, b - 1]; for any other b, no bound
            positive = ("ge", lb_, _const(1))
            self._set(op.result, ("sel", positive, _const(0), _const(-math.inf)),
                      ("sel", positive, ("add", ub_, _const(-1)), _const(math.inf)))
        elif kind == "min":   # at least the smaller lower bound; at most either upper bound
            self._set(op.result, both(la, lb_, "min"), both(ua, ub_, "min") or (ua if ua is not None else ub_))
        elif kind == "max":   # at least either lower bound; at most the larger upper bound
            self._set(op.result, both(la, lb_, "max") or (la if la is not None else lb_), both(ua, ub_, "max"))


def _int_max(d) -> int:
    """The largest value of integer dtype `d`."""
    return (1 << d.bits) - 1 if d.kind == "uint" else (1 << (d.bits - 1)) - 1


def _value_preserving(src, dst) -> bool:
    """Whether every value of int dtype `src` is the same value in int dtype `dst` (a narrowing
    or sign-changing cast wraps, so the symbolic value would no longer describe the result)."""
    if not (src.is_int and dst.is_int):
        return False
    if src.kind == dst.kind:
        return dst.bits >= src.bits
    return src.kind == "uint" and dst.kind == "int" and dst.bits > src.bits


def _check(op: Op, ranges: _Ranges, static_extents) -> AccessCheck:
    tensor = op.args[0].name
    ttype = op.args[0].type
    mode = op.attrs.get("mode", "tile")
    if op.opcode == "gather":
        shape, index = op.attrs["shape"], op.args[2:]
    elif op.opcode == "store":
        shape = op.args[1].shape
        index = op.args[2:]
    else:
        shape, index = op.attrs["shape"], op.args[1:]
    axes = []
    for a in range(ttype.rank):
        extent = ranges.extent(tensor, a)
        if op.opcode == "gather" and a == op.attrs["axis"]:
            axes.append(AxisCheck(a, KERNEL, None))
            continue
        if mode in ("block", "subtile", "member"):   # a member's tile is some block's own tile
            owner = op.attrs.get("owner", tensor)
            tile = ranges.fn.param(owner).value.type.tile[a]
            cond = ("le", ("mul", ("grid", a), _const(tile)), extent)
        elif mode == "group":                         # a MutLast tile: grid axes 1.. (S16)
            cond = ("le", ("mul", ("grid", a + 1), _const(ttype.tile[a])), extent)
        else:
            rng = ranges.bounds(index[a])
            if rng is None:
                axes.append(AxisCheck(a, KERNEL, None))
                continue
            lo, hi = rng
            cond = ("and", ("ge", lo, _const(0)), ("le", ("mul", hi, _const(shape[a])), extent))
        axes.append(_classify(a, cond))
    return AccessCheck(op, tensor, op.opcode, op.loc, tuple(axes))


def _classify(axis: int, cond) -> AxisCheck:
    if _is_static(cond):
        return AxisCheck(axis, STATIC if evaluate(cond, None) else KERNEL, None)
    return AxisCheck(axis, LAUNCH, cond)


def _is_static(expr) -> bool:
    if expr[0] == "const":
        return True
    if expr[0] in ("extent", "scalar", "grid"):
        return False
    return all(_is_static(e) for e in expr[1:])
