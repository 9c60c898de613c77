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

from dataclasses import dataclass

from ...lang.annotations import PTR
from ...lang.ir import Block, Function, TensorType, walk
from . import emit_control, emit_memory, emit_ops, emit_prefetch
from .emit_memory import barrier_loads
from .emitter import ArgSlot, Emitter, TensorNames

# Opcode -> emitter; where two modules name one opcode, emit_ops wins, then emit_memory.
HANDLERS = {**emit_control.EMITTERS, **emit_prefetch.EMITTERS, **emit_memory.EMITTERS, **emit_ops.EMITTERS}
_PDL_WAIT = ["    gdc_wait()   # PDL: the kernel before this one has finished, its writes visible",
             "    gdc_launch_dependents()"]


@dataclass(frozen=True)
class Generated:
    """What `generate` returns: the source and how to call the function it defines."""
    name: str
    text: str
    args: tuple[ArgSlot, ...]
    descriptors: frozenset = frozenset()   # tensors whose eligible accesses use TMA descriptors
    column_major: frozenset = frozenset()  # those of them addressed as their transpose


# --- the function ------------------------------------------------------------------------------
def generate(kernel, spec, masks: dict, wide: bool, descriptors=frozenset(), linear_grid: bool = False,
             column_major=frozenset(), reversed_axes=(), pdl: bool = False, early=frozenset()) -> Generated:
    """The Triton source of one specialization (`descriptors`: tensors eligible for TMA;
    `column_major`: those of them whose columns, not rows, are contiguous, e.g. `w.T`).

    `linear_grid`: the launch grid is flattened to one axis (CUDA allows only 65535 blocks
    along axes 1 and 2); the kernel recovers its 3-D block index from the flat one.

    `pdl`: the kernel is launched with programmatic dependent launch. Its first statement
    waits for the kernel before it (griddepcontrol.wait: that kernel complete, its writes
    visible), so no access of this kernel can see the earlier one unfinished; the second
    lets the next PDL kernel start launching (it waits likewise). Only a kernel that begins
    with `ts.prefetch` statements (and the index arithmetic they need) runs those first: they
    touch no memory but L2 lines of read-only inputs (emit_prefetch.py); and with `early`
    (names of ts.Ref parameters the launch binds to frozen memory, runtime/freeze.py: no
    kernel writes it, so the one before cannot be) the loads of those it begins with."""
    fn: Function = spec.fn
    em = Emitter(fn, masks, wide, frozenset(descriptors), frozenset(column_major), tuple(reversed_axes), pdl=pdl,
                 handlers=HANDLERS)
    frozen = frozenset(id(p.value) for p in fn.params if p.name in early and p.value is not None)
    head = emit_prefetch.head_before_wait(fn.body, frozen) if pdl else 0
    if pdl and not head:
        em.prologue += _PDL_WAIT
    slots = _signature(em, fn)
    if linear_grid:
        slots += _linear_grid(em)
    if any(op.opcode == "arrive" for op in fn.body.ops):
        em.arrivals = em.fresh("arrivals")
        slots.append(ArgSlot(em.arrivals, "", "arrivals"))
    em.barriers = barrier_loads(fn)
    em.stored = frozenset(id(op.args[1]) for op in walk(fn.body) if op.opcode == "store")
    if head:   # the prefetches, then the wait, then the rest
        em.emit_block(Block(ops=fn.body.ops[:head]))
        em.lines += _PDL_WAIT
        em.emit_block(Block(ops=fn.body.ops[head:]))
    else:
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
