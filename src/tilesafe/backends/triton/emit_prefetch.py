"""`ts.prefetch` (lang/prefetch.py) in Triton: L2 prefetches, and where the PDL wait goes.

Under programmatic dependent launch (`em.pdl`: an NVIDIA GPU of compute capability 9.0 or
newer, never the interpreter) a prefetch of tile `index` of a Ref becomes one
`prefetch.global.L2` (`::evict_last` with keep=True) per 128-byte line of the tile: the
tile's contiguous axis is sampled every 128 bytes (which axis has stride 1 is a launch fact
Triton specializes on, so the branch below folds away), the other axes element by element. Elements outside the tensor
are masked off through a predicate, as a load's are (S11: the bounds plan's flags).
Elsewhere it compiles to nothing: without PDL the loads that follow fetch the same lines.

`head_before_wait(body, frozen)` says how many of the kernel's first statements may run
before `gdc_wait()`: a run of statements that touch no memory except through prefetches and
loads of frozen inputs (index arithmetic, and loops or branches made only of such
statements), ending in at least one prefetch or such load. The wait then follows them; with
neither it stays the kernel's first statement. `frozen` holds the IR values of the ts.Ref
parameters the launch binds to frozen memory (runtime/freeze.py): no kernel writes those
bytes any more, so the kernel before this one cannot be writing them, and a load of them
needs no wait — its tile is in registers when the wait returns.
"""
from __future__ import annotations

from ...lang.bounds import GUARD
from ...lang.ir import Block, Op
from .emitter import Emitter
from .tile_geometry import access_flags, axis_mask, expand, geometry, tile_guard

LINE_BYTES = 128   # an L2 line; a prefetch brings in the line holding its address

# Ops that read or write no memory: they may run before the PDL wait.
_NO_MEMORY = frozenset({"const", "block_id", "num_blocks", "extent", "num_tiles", "binary", "compare", "unary",
                        "where", "fma", "cast", "full", "arange", "reduce", "cumsum", "reshape", "permute",
                        "broadcast_to", "expand_dims", "join", "yield", "prefetch"})
_REGIONS = frozenset({"for", "if"})


def _frozen_load(op: Op, frozen: frozenset) -> bool:
    return op.opcode == "load" and bool(op.args) and id(op.args[0]) in frozen


def _touches_no_memory(op: Op, frozen: frozenset = frozenset()) -> bool:
    """No memory but prefetches and loads of frozen inputs (`frozen`: their IR values' ids)."""
    if op.opcode in _REGIONS:
        return all(_touches_no_memory(inner, frozen) for r in op.regions for inner in r.ops)
    return op.opcode in _NO_MEMORY or _frozen_load(op, frozen)


def _prefetches(op: Op, frozen: frozenset = frozenset()) -> bool:
    return op.opcode == "prefetch" or _frozen_load(op, frozen) \
        or any(_prefetches(inner, frozen) for r in op.regions for inner in r.ops)


def head_before_wait(body: Block, frozen: frozenset = frozenset()) -> int:
    """How many leading top-level ops of `body` go before the PDL wait (0: the wait comes first)."""
    n = 0
    while n < len(body.ops) and _touches_no_memory(body.ops[n], frozen):
        n += 1
    while n > 0 and not _prefetches(body.ops[n - 1], frozen):   # nothing to overlap after the last one
        n -= 1
    return n


def emit_prefetch(em: Emitter, op: Op) -> None:
    if not em.pdl:
        em.line("pass   # ts.prefetch: issued only under programmatic dependent launch")
        return
    g = geometry(em, op)
    rank = len(g.shape)
    flags = access_flags(em, op, rank)
    names = em.tensors[g.tensor]
    step = max(1, LINE_BYTES // op.args[0].dtype.itemsize)       # elements per line
    # Which axis is contiguous: Triton specializes a stride of 1 to a constant, so all but
    # one of these branches disappear when it compiles.
    axes = [a for a in reversed(range(rank)) if g.shape[a] > 1]
    for n, a in enumerate(axes):
        em.line(f"{'if' if n == 0 else 'elif'} {names.strides[a]} == 1:")
        _issue(em, op, g, flags, a, step)
    if axes:
        em.line("else:")
    _issue(em, op, g, flags, None, step, indent=bool(axes))


def _issue(em: Emitter, op: Op, g, flags, contiguous: int | None, step: int, indent: bool = True) -> None:
    """The prefetches of tile `g` with axis `contiguous` sampled every `step` elements."""
    em.enter(indent)
    rank = len(g.shape)
    offs, parts = [], []
    for a, (o, s) in enumerate(zip(g.origins, g.shape)):
        if a == contiguous:   # one address per line (a tile narrower than a line: its first element)
            ar = f"tl.arange(0, {s // step}) * {step}" if s > step else "tl.arange(0, 1)"
        else:
            ar = f"tl.arange(0, {s})"
        name = em.fresh(f"pf_offs{a}")
        em.line(f"{name} = {ar if o == '0' else f'{o} + {ar}'}")
        offs.append(name)
        if flags[a]:
            if flags[a] == GUARD and g.indices:
                parts.append(tile_guard(em, g.tensor, a, g.indices[a], g.shape[a]))
            parts.append(expand(f"({axis_mask(em, g.tensor, a, name, g.may_be_negative)})", a, rank))
    names = em.tensors[g.tensor]
    insn = "prefetch.global.L2::evict_last" if op.attrs.get("keep") else "prefetch.global.L2"
    ptrs = f"{names.ptr} + {' + '.join(f'{expand(o, a, rank)} * {names.strides[a]}' for a, o in enumerate(offs))}"
    p = em.fresh("pf_ptrs")
    em.line(f"{p} = {ptrs}")
    done = em.fresh("pf_done")
    if parts:
        m = em.fresh("pf_on")
        em.line(f"{m} = tl.broadcast_to(({' & '.join(parts)}).to(tl.int32), {p}.shape)")
        asm = f"{{ .reg .pred p; setp.ne.b32 p, $2, 0; @p {insn} [$1]; mov.u32 $0, 0; }}"
        em.line(f'{done} = tl.inline_asm_elementwise("{asm}", "=r,l,r", [{p}, {m}], dtype=tl.int32, '
                'is_pure=False, pack=1)')
    else:
        em.line(f'{done} = tl.inline_asm_elementwise("{insn} [$1]; mov.u32 $0, 0;", "=r,l", [{p}], '
                'dtype=tl.int32, is_pure=False, pack=1)')
    em.leave(indent)


EMITTERS = {"prefetch": emit_prefetch}
