"""S11: where each tile access needs an in-kernel bounds mask, and the report of it.

For every load, store and gather, and every axis, the pass derives the range of the tile
index from where it comes from (a block id, a loop over `num_tiles`, a minted walk index,
a constant) and states the access's in-bounds condition as a small expression over the
launch's extents, scalars and grid. A condition with no runtime leaves is decided now
("static"); one with runtime leaves is decided by each launch ("launch": the launch picks
the maskless code when it holds); an index of unknown range keeps its mask ("kernel").
"""
from __future__ import annotations

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
    a = evaluate(expr[1], facts)
    b = evaluate(expr[2], facts)
    return {"add": lambda: a + b, "mul": lambda: a * b, "cdiv": lambda: -(-a // b),
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
    """Symbolic facts about integer scalars: an exact value, or a [lo, hi) range."""

    def __init__(self, fn: Function, static_extents: dict):
        self.exact: dict[int, tuple] = {}
        self.range: dict[int, tuple] = {}
        self.static = static_extents
        self.fn = fn
        for p in fn.params:
            if p.value is not None and not isinstance(p.value.type, TensorType) and p.value.dtype.is_int:
                self.exact[id(p.value)] = ("scalar", p.name)

    def extent(self, tensor: str, axis: int):
        if (tensor, axis) in self.static:
            return _const(self.static[(tensor, axis)])
        return ("extent", tensor, axis)

    def bounds(self, v: Value):
        if id(v) in self.exact:
            e = self.exact[id(v)]
            return e, ("add", e, _const(1))
        return self.range.get(id(v))

    def visit(self, op: Op) -> None:
        code = op.opcode
        if code == "const" and op.result.dtype.is_int:
            self.exact[id(op.result)] = _const(op.attrs["value"])
        elif code == "block_id":
            self.range[id(op.result)] = (_const(0), ("grid", op.attrs["axis"]))
        elif code == "extent":
            self.exact[id(op.result)] = self.extent(op.args[0].name, op.attrs["axis"])
        elif code == "num_tiles":
            self.exact[id(op.result)] = ("cdiv", self.extent(op.args[0].name, op.attrs["axis"]), _const(op.attrs["tile"]))
        elif code == "cast" and id(op.args[0]) in self.exact and _value_preserving(op.args[0].dtype, op.result.dtype):
            self.exact[id(op.result)] = self.exact[id(op.args[0])]
        elif code == "for":
            lo, hi, step = op.args[:3]
            step_e = self.exact.get(id(step))
            positive = step_e is not None and step_e[0] == "const" and step_e[1] > 0
            if positive and id(lo) in self.exact and id(hi) in self.exact:
                self.range[id(op.regions[0].args[0])] = (self.exact[id(lo)], self.exact[id(hi)])
        elif code == "tiles" and not op.attrs["windowed"]:
            tt = self.fn.param(op.attrs["output"]).value.type
            for a, arg in enumerate(op.regions[0].args[:op.attrs["rank"]]):
                self.range[id(arg)] = (_const(0), ("cdiv", self.extent(op.attrs["output"], a), _const(tt.tile[a])))


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
        if mode in ("block", "subtile"):
            owner = op.attrs.get("owner", tensor)
            tile = ranges.fn.param(owner).value.type.tile[a]
            cond = ("le", ("mul", ("grid", a), _const(tile)), extent)
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
