"""Tile IR -> Triton source text: one readable `@triton.jit` function per specialization.

`generate(kernel, spec, masks, wide)` is the entry point (`kernel.source()` and the Triton
backend both call it). The generated function takes, for every tensor parameter, a pointer,
its per-axis extents and its per-axis strides (runtime ints, so Triton specializes them on
divisibility by 16 and on being 1); for a `ts.Ptr` the pointer and its element count; runtime
scalars as themselves. `Const` values are already folded into the IR and appear as literals.

Rules the emitters follow (each op's emitter lives in emit_ops / emit_memory / emit_control):
  * Every IR value becomes a Python name or an inline literal. Constants are inlined.
  * A scalar that may be a Triton `constexpr` at compile time is *weak*: literals, and runtime
    ints (Triton specializes an int argument equal to 1 into a constexpr) and arithmetic on
    them. Where Triton needs a typed tensor (loop-carried values, branch results, typed ops)
    the emitter wraps a weak scalar in `tl.cast(x, dtype)`.
  * Masks appear only on the axes `bounds.masks_for` flagged (S11); everything else is the
    numeric semantics of `backends/reference/numerics.py`, reproduced op by op.
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
from ...lang.annotations import PTR
from ...lang.ir import Block, Function, Op, TensorType, Value, walk

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


@dataclass(frozen=True)
class Generated:
    """What `generate` returns: the source and how to call the function it defines."""
    name: str
    text: str
    args: tuple[ArgSlot, ...]
    descriptors: frozenset = frozenset()   # tensors whose eligible accesses use TMA descriptors
    column_major: frozenset = frozenset()  # those of them addressed as their transpose


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
            emit_op(self, op)
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
        return repr(v) if v >= 0 else f"({v!r})"
    v = int(value)
    return str(v) if v >= 0 else f"({v})"


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


# --- dispatch ----------------------------------------------------------------------------------
def emit_op(em: Emitter, op: Op) -> None:
    from . import emit_control, emit_memory, emit_ops
    handler = emit_ops.EMITTERS.get(op.opcode) or emit_memory.EMITTERS.get(op.opcode) \
        or emit_control.EMITTERS.get(op.opcode)
    if handler is None:
        raise KernelError(f"the Triton backend cannot generate `{op.opcode}` yet", op.loc,
                          help="run this kernel on the reference backend: with ts.backend(\"reference\")")
    handler(em, op)


# --- the function ------------------------------------------------------------------------------
def generate(kernel, spec, masks: dict, wide: bool, descriptors=frozenset(), linear_grid: bool = False,
             column_major=frozenset(), reversed_axes=(), pdl: bool = False) -> Generated:
    """The Triton source of one specialization (`descriptors`: tensors eligible for TMA;
    `column_major`: those of them whose columns, not rows, are contiguous, e.g. `w.T`).

    `linear_grid`: the launch grid is flattened to one axis (CUDA allows only 65535 blocks
    along axes 1 and 2); the kernel recovers its 3-D block index from the flat one.

    `pdl`: the kernel is launched with programmatic dependent launch. Its first statement
    waits for the kernel before it (griddepcontrol.wait: that kernel complete, its writes
    visible), so no access of this kernel can see the earlier one unfinished; the second
    lets the next PDL kernel start launching (it waits likewise)."""
    from .emit_memory import barrier_loads
    fn: Function = spec.fn
    em = Emitter(fn, masks, wide, frozenset(descriptors), frozenset(column_major), tuple(reversed_axes), pdl=pdl)
    if pdl:
        em.prologue += ["    gdc_wait()   # PDL: the kernel before this one has finished, its writes visible",
                        "    gdc_launch_dependents()"]
    slots = _signature(em, fn)
    if linear_grid:
        slots += _linear_grid(em)
    if any(op.opcode == "arrive" for op in fn.body.ops):
        em.arrivals = em.fresh("arrivals")
        slots.append(ArgSlot(em.arrivals, "", "arrivals"))
    em.barriers = barrier_loads(fn)
    em.stored = frozenset(id(op.args[1]) for op in walk(fn.body) if op.opcode == "store")
    em.emit_block(fn.body)
    slots += em.desc_slots
    name = em.fresh(fn.name) if fn.name in {s.name for s in slots} else fn.name
    text = _assemble(kernel, fn, name, slots, em)
    return Generated(name, text, tuple(slots), em.descriptors, em.column_major)


def _linear_grid(em: Emitter) -> list[ArgSlot]:
    g1, g2 = em.fresh("grid1"), em.fresh("grid2")
    flat, p0, p1, p2 = em.fresh("pid"), em.fresh("pid0"), em.fresh("pid1"), em.fresh("pid2")
    em.prologue += [f"    {flat} = tl.program_id(0)", f"    {p2} = {flat} % {g2}",
                    f"    {p1} = ({flat} // {g2}) % {g1}", f"    {p0} = {flat} // ({g2} * {g1})"]
    em.grid_names = (p0, p1, p2, g1, g2)
    return [ArgSlot(g1, "", "grid", 1), ArgSlot(g2, "", "grid", 2)]


def _signature(em: Emitter, fn: Function) -> list[ArgSlot]:
    slots: list[ArgSlot] = []
    for p in fn.params:
        if p.value is None:
            continue
        if isinstance(p.value.type, TensorType):
            ptr = em.fresh(f"{p.name}_ptr")
            slots.append(ArgSlot(ptr, p.name, "ptr", dtype=p.value.dtype))
            if p.kind == PTR:
                numel = em.fresh(f"{p.name}_numel")
                slots.append(ArgSlot(numel, p.name, "numel"))
                em.tensors[p.name] = TensorNames(ptr, numel=numel)
            else:
                rank = p.value.type.rank
                ext = tuple(em.fresh(f"{p.name}_n{a}") for a in range(rank))
                strides = tuple(em.fresh(f"{p.name}_s{a}") for a in range(rank))
                slots += [ArgSlot(n, p.name, "extent", a) for a, n in enumerate(ext)]
                slots += [ArgSlot(s, p.name, "stride", a) for a, s in enumerate(strides)]
                em.tensors[p.name] = TensorNames(ptr, ext, strides)
            em.tensor_of[id(p.value)] = p.name
        else:
            name = em.fresh(p.name)
            slots.append(ArgSlot(name, p.name, "scalar", dtype=p.value.dtype))
            # Weak: Triton specializes an int argument equal to 1 into a constexpr, and its
            # interpreter passes floats through as Python floats.
            em.alias(p.value, name, weak=True)
    return slots


def _assemble(kernel, fn: Function, name: str, slots: list[ArgSlot], em: Emitter) -> str:
    where = getattr(getattr(kernel, "src", None), "file", None)
    masked = sum(1 for m in em.masks.values() if any(m))
    head = [
        f"# Generated by tilesafe from kernel `{fn.name}`{f' ({where})' if where else ''}.",
        "# Regenerated for each specialization; edit the kernel, not this file.",
        f"# offsets: {'64' if em.wide else '32'}-bit; accesses with an in-kernel mask: {masked} of {len(em.masks)}; "
        f"tensor descriptors: {', '.join(sorted(em.descriptors)) or 'none'}",
        "import triton",
        "import triton.language as tl",
        *(["from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait"] if em.pdl else []),
        "",
        "",
        "@triton.jit",
        f"def {name}(",
    ]
    for k in range(0, len(slots), 6):
        chunk = ", ".join(s.name for s in slots[k:k + 6])
        head.append(f"    {chunk},")
    head.append("):")
    body = em.prologue + em.lines
    if not body:
        body = ["    pass"]
    return "\n".join(head + body) + "\n"
