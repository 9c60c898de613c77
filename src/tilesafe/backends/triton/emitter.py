"""The emitter: Triton source lines under construction, and the names IR values have in them.

Shared by the pass that writes a whole function (codegen.py) and the per-op emitters
(emit_ops, emit_memory, emit_control), which each register their opcodes; `Emitter.emit_block`
dispatches through the table codegen hands it, so the emitters and codegen import this module
and not each other. The rules the emitters follow are in codegen.py's header.
"""
from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...errors import KernelError
from ...lang.ir import Block, Function, Value

# Names the generated code itself uses; IR names that collide get a suffix.
_RESERVED = {"tl", "triton", "range", "float", "int", "min", "max", "abs", "len", "print", "sum", "True",
             "False", "None"}


@dataclass(frozen=True, slots=True)
class ArgSlot:
    """One runtime argument of the generated function, in order."""
    name: str       # the name in the generated source
    param: str      # the kernel parameter it comes from
    what: str       # "ptr" | "extent" | "stride" | "numel" | "scalar" | "grid" (linearised launches) | "desc"
                    # | "arrivals" (S16: the runtime's int32 ticket counters, one per group, zero)
    axis: int = 0
    dtype: DType | None = None   # the element type of a pointer or descriptor, the type of a scalar
    box: tuple = ()              # "desc": the TMA box; the launch builds the descriptor on the host


@dataclass(slots=True)
class TensorNames:
    """The generated-source names of one tensor parameter."""
    ptr: str
    extents: tuple[str, ...] = ()
    strides: tuple[str, ...] = ()
    numel: str | None = None


@dataclass
class Emitter:
    """Source lines under construction plus the mapping from IR values to expressions."""
    fn: Function
    masks: dict
    wide: bool
    descriptors: frozenset
    column_major: frozenset = frozenset()           # descriptor tensors with contiguous columns
    reversed_axes: tuple = ()                       # grid axes numbered from the far end (schedule)
    pdl: bool = False                               # launched with programmatic dependent launch
    lines: list[str] = field(default_factory=list)
    prologue: list[str] = field(default_factory=list)
    depth: int = 1
    exprs: dict = field(default_factory=dict)      # id(Value) -> expression
    weak: set = field(default_factory=set)          # id(Value) of scalars that may be constexpr
    used: set = field(default_factory=lambda: set(_RESERVED))
    tensors: dict = field(default_factory=dict)     # param name -> TensorNames
    tensor_of: dict = field(default_factory=dict)   # id(tensor Value) -> param name
    barriers: set = field(default_factory=set)      # id(load op) that need a barrier first (S15)
    desc_names: dict = field(default_factory=dict)  # (tensor, block shape) -> descriptor name
    desc_slots: list = field(default_factory=list)  # their arguments, in order of first use
    scopes: list = field(default_factory=lambda: [{}])  # per open region: expression -> name
    grid_names: tuple = ()                          # linearised grid: (pid0, pid1, pid2, g1, g2)
    arrivals: str = ""                              # S16: the per-group ticket counters' pointer
    stored: frozenset = frozenset()                 # id(Value) of every tile a store writes
    handlers: dict = field(default_factory=dict)    # opcode -> its emitter (codegen.HANDLERS)

    def pid(self, axis: int) -> str:
        """This block's index along grid `axis` (from the far end on a reversed axis)."""
        pid = self.grid_names[axis] if self.grid_names else f"tl.program_id({axis})"
        if axis in self.reversed_axes:
            return f"({self.num_blocks(axis)} - 1 - {pid})"
        return pid

    def num_blocks(self, axis: int) -> str:
        if self.grid_names:
            g1, g2 = self.grid_names[3:]
            return (f"(tl.num_programs(0) // ({g1} * {g2}))", g1, g2)[axis]
        return f"tl.num_programs({axis})"

    # --- regions ---------------------------------------------------------------------------
    def enter(self, indent: bool = True) -> None:
        """Open a region: names bound inside are not visible after `leave()` (Triton scoping)."""
        self.depth += indent
        self.scopes.append({})

    def leave(self, indent: bool = True) -> None:
        self.depth -= indent
        self.scopes.pop()

    # --- names and lines -----------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        base = re.sub(r"\W", "_", hint or "t").strip("_") or "t"
        if base[0].isdigit():
            base = "v" + base
        name, n = base, 1
        while name in self.used or keyword.iskeyword(name):
            name, n = f"{base}_{n}", n + 1
        self.used.add(name)
        return name

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def bind(self, v: Value, expr: str, hint: str = "t", weak: bool = False) -> str:
        """Emit `name = expr` for `v` and remember the name."""
        name = self.fresh(v.name or hint)
        self.line(f"{name} = {expr}")
        self.alias(v, name, weak)
        return name

    def memo(self, expr: str, hint: str) -> str:
        """A name holding `expr`, reusing one bound earlier in a visible region."""
        for scope in reversed(self.scopes):
            if expr in scope:
                return scope[expr]
        name = self.fresh(hint)
        self.line(f"{name} = {expr}")
        self.scopes[-1][expr] = name
        return name

    def alias(self, v: Value, expr: str, weak: bool = False) -> None:
        self.exprs[id(v)] = expr
        if weak:
            self.weak.add(id(v))

    # --- operands ----------------------------------------------------------------------------
    def ref(self, v: Value) -> str:
        return self.exprs[id(v)]

    def is_weak(self, v: Value) -> bool:
        return id(v) in self.weak

    def strong(self, v: Value) -> str:
        """`v` as a typed Triton tensor (a weak scalar is wrapped in tl.cast)."""
        if self.is_weak(v):
            return f"tl.cast({self.ref(v)}, {ttype(v.dtype)})"
        return self.ref(v)

    def tensor(self, v: Value) -> TensorNames:
        return self.tensors[self.tensor_of[id(v)]]

    def tensor_name(self, v: Value) -> str:
        return self.tensor_of[id(v)]

    # --- blocks ------------------------------------------------------------------------------
    def emit_block(self, block: Block) -> list[Value]:
        """Emit a block's ops; return the values its `yield` passes on."""
        for op in block.ops:
            if op.opcode == "yield":
                return list(op.args)
            handler = self.handlers.get(op.opcode)
            if handler is None:
                raise KernelError(f"the Triton backend cannot generate `{op.opcode}` yet", op.loc,
                                  help="run this kernel on the reference backend: with ts.backend(\"reference\")")
            handler(self, op)
        return []

    def emit_region(self, block: Block, names: list[str], weak=()) -> list[Value]:
        """Emit a region whose arguments live in the variables `names`; return what it yields."""
        for a, name, w in zip(block.args, names, list(weak) + [False] * len(names)):
            self.alias(a, name, w)
        return self.emit_block(block)

    def body(self, start: int) -> None:
        """Close an indented body begun at line `start`: Python needs at least one statement."""
        if len(self.lines) == start:
            self.line("pass")

    def assign(self, names: list[str], values: list[Value]) -> None:
        """`names[i] = values[i]` for all i at once (a value may read another slot's variable)."""
        exprs = [self.carried(v) for v in values]
        # Assigned one after another, a value must not read a variable already overwritten.
        clash = any(re.search(rf"\b{re.escape(names[j])}\b", exprs[i])
                    for i in range(len(names)) for j in range(i) if names[j] != exprs[j])
        if clash:
            temps = [self.fresh("tmp") for _ in exprs]
            for t, e in zip(temps, exprs):
                self.line(f"{t} = {e}")
            exprs = temps
        for n, e in zip(names, exprs):
            if n != e:
                self.line(f"{n} = {e}")

    def carried(self, v: Value) -> str:
        """A value stored in a loop-carried or branch-result variable: always typed."""
        return self.strong(v) if v.shape == () else self.ref(v)


def ttype(d: DType) -> str:
    return f"tl.{d.triton_name}"


def literal(value, d: DType) -> str:
    """A Python literal Triton reads as `value` (already representable in `d`)."""
    if d.is_bool:
        return "True" if value else "False"
    if d.is_float:
        v = float(value)
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else '(-float("inf"))'
        if is_negative_zero(v):
            return negative_zero(d)
        return repr(v) if v >= 0 else f"({v!r})"
    v = int(value)
    return str(v) if v >= 0 else f"({v})"


def is_negative_zero(v) -> bool:
    """-0.0: `literal` makes it a typed scalar, which is no weak (constexpr) value."""
    return isinstance(v, float) and v == 0 and math.copysign(1.0, v) < 0


def negative_zero(d: DType) -> str:
    """-0.0 of float type `d` as a 0-d tensor. Triton 3.6 turns a literal -0.0 into +0.0
    (`semantic.scalar_constant` takes any value == 0 for the type's null value; `-x` is
    `0 - x`, +0.0 again), so the sign bit alone is bit-cast into `d`."""
    bits = d.itemsize * 8
    return f"tl.full((), {-(1 << (bits - 1))}, tl.int{bits}).to({ttype(d)}, bitcast=True)"


def fold_value(value, d: DType):
    """A Python number converted to `d` exactly as numerics.cast does (fills and paddings)."""
    if d.is_bool:
        return bool(value)
    if d.is_float:
        v = float(value)
        if d.name.startswith("f8") and not math.isnan(v):
            lo, hi = dt.finite_range(d)
            v = min(max(v, lo), hi)
        return float(np.asarray(v, np.float64).astype(d.np).astype(np.float64))
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        lo, hi = dt.finite_range(d)
        return int(min(max(math.trunc(value), lo), hi)) if math.isfinite(value) else int(lo if value < 0 else hi)
    return int(np.asarray(int(value), np.int64).astype(d.np))
