"""Triton emitters for memory: tile loads and stores, `valid`, `gather`, unsafe pointer ops.

A tile access at element origin `o` (per axis) with tile shape `s` becomes
    offs_a = o_a + tl.arange(0, s_a)
    ptrs   = ptr + sum_a offs_a[expanded to axis a] * stride_a
and a masked `tl.load(..., other=padding)` / `tl.store(..., mask=...)` — masked only on the
axes `bounds.masks_for` flagged (S11). The origins, per access mode, and the masks are built
in `tile_geometry.py` (the prefetches of `emit_prefetch` address the same tiles). A 'tile' index's product
`index_a * shape_a` wraps in 32 bits for a large index; where the launch could not show that it
fits, the axis is flagged `bounds.GUARD` and its mask also requires
    0 <= index_a <= (extent_a - 1) // shape_a          (tile index_a overlaps the tensor)
which is exact without the product, so a wrapped offset is never dereferenced.

When the backend marks a tensor as descriptor-eligible (a matrix, or, when TMA is forced,
a tensor of rank 3 to 5; contiguous last axis, 16-byte aligned base and strides; see
`tma.py`), its tile loads and stores use a TMA tensor descriptor instead (an extra kernel
argument the launch builds on the host), masked ones too where TMA's own bounds check
gives the same result (zero padding, 32-bit offsets). A matrix with contiguous columns instead (a transposed
view such as `w.T`) is described as its transpose, and its tiles are transposed in
registers (`tl.trans`), which the tensor-core operand path absorbs.

S15: a load of an output that may follow a store to the same output in this block gets a
`tl.debug_barrier()` first, so every thread sees the stored elements.
"""
from __future__ import annotations

import math

from ...lang.bounds import GUARD
from ...lang.ir import Block, Function, Op
from .emitter import ArgSlot, Emitter, fold_value, literal
from .tile_geometry import TileGeometry, access_flags, axis_mask, expand, geometry, index_expr, scaled, tile_guard

_LOOPS = ("for", "while", "tiles", "subtiles")


def _offsets(em: Emitter, g: TileGeometry) -> list[str]:
    names = []
    for a, (o, s) in enumerate(zip(g.origins, g.shape)):
        ar = f"tl.arange(0, {s})"
        names.append(em.memo(ar if o == '0' else f'{o} + {ar}', f"offs{a}"))
    return names


def _pointers(em: Emitter, tensor: str, offs: list[str]) -> str:
    names = em.tensors[tensor]
    terms = [f"{expand(o, a, len(offs))} * {names.strides[a]}" for a, o in enumerate(offs)]
    return f"{names.ptr} + {' + '.join(terms)}"


def _mask(em: Emitter, g: TileGeometry, offs: list[str], flags) -> str | None:
    """The in-bounds mask over the flagged axes, or None when no axis needs one."""
    parts = []
    for a, need in enumerate(flags):
        if need:
            if need == GUARD and g.indices:
                parts.append(tile_guard(em, g.tensor, a, g.indices[a], g.shape[a]))
            m = em.memo(axis_mask(em, g.tensor, a, offs[a], g.may_be_negative), f"{g.tensor}_in{a}")
            parts.append(expand(m, a, len(offs)))
    return " & ".join(parts) if parts else None


def _padding(op: Op) -> str:
    d = op.results[0].dtype
    return literal(fold_value(op.attrs["padding"], d), d)


# --- tile accesses ----------------------------------------------------------------------------
def emit_load(em: Emitter, op: Op) -> None:
    if id(op) in em.barriers:
        em.line("tl.debug_barrier()   # S15: see this block's earlier stores")
    g = geometry(em, op)
    flags = access_flags(em, op, len(g.shape))
    hint = f"{g.tensor}_tile"
    if _use_descriptor(em, op, g, flags):
        desc = _descriptor(em, g, op.args[0].dtype)
        if g.tensor in em.column_major:   # the descriptor addresses the transpose: (cols, rows)
            em.bind(op.result, f"tl.trans({desc}.load([{g.origins[1]}, {g.origins[0]}]))", hint)
        else:
            em.bind(op.result, f"{desc}.load([{', '.join(g.origins)}])", hint)
        return
    offs = _offsets(em, g)
    ptrs = _pointers(em, g.tensor, offs)
    mask = _mask(em, g, offs, flags)
    # Another SM wrote a member's tile: read it from L2 (.cg), never from this SM's L1.
    cache = ', cache_modifier=".cg"' if op.attrs["mode"] == "member" else ""
    if mask is None:
        em.bind(op.result, f"tl.load({ptrs}{cache})", hint)
    else:
        em.bind(op.result, f"tl.load({ptrs}, mask={mask}, other={_padding(op)}{cache})", hint)


def emit_store(em: Emitter, op: Op) -> None:
    g = geometry(em, op)
    value = op.args[1]
    flags = access_flags(em, op, len(g.shape))
    if _use_descriptor(em, op, g, flags):
        desc = _descriptor(em, g, op.args[0].dtype)
        if g.tensor in em.column_major:
            em.line(f"{desc}.store([{g.origins[1]}, {g.origins[0]}], tl.trans({em.strong(value)}))")
        else:
            em.line(f"{desc}.store([{', '.join(g.origins)}], {em.strong(value)})")
        return
    offs = _offsets(em, g)
    ptrs = _pointers(em, g.tensor, offs)
    mask = _mask(em, g, offs, flags)
    em.line(f"tl.store({ptrs}, {em.strong(value)}{'' if mask is None else f', mask={mask}'})")


def emit_valid(em: Emitter, op: Op) -> None:
    """The in-bounds mask of the load with the same operands and attributes (every axis; a
    'tile' index is guarded, as bounds.GUARD, since no plan covers `valid`)."""
    g = geometry(em, op)
    offs = _offsets(em, g)
    lower = g.may_be_negative
    parts = []
    for a in range(len(g.shape)):
        if g.indices:
            parts.append(tile_guard(em, g.tensor, a, g.indices[a], g.shape[a]))
        parts.append(expand(f"({axis_mask(em, g.tensor, a, offs[a], lower)})", a, len(g.shape)))
    expr = " & ".join(parts)
    if len(g.shape) > 1:
        expr = f"tl.broadcast_to({expr}, {g.shape})"
    em.bind(op.result, expr, f"{g.tensor}_valid")


def emit_gather(em: Emitter, op: Op) -> None:
    """Rows (along `axis`) at positions from a tile; other axes a tile at `index`."""
    x, pos, index = op.args[0], op.args[1], op.args[2:]
    tensor, axis, shape = em.tensor_name(x), op.attrs["axis"], tuple(op.attrs["shape"])
    flags = access_flags(em, op, len(shape))
    rank = len(shape)
    offs, parts = [], []
    for a in range(rank):
        n = em.fresh(f"{tensor}_offs{a}")
        if a == axis:
            p = em.ref(pos)
            em.line(f"{n} = {p}.to(tl.int64)" if em.wide else f"{n} = {p}")
            need, lower = True, True
        else:
            origin = scaled(index_expr(em, index[a]), shape[a])
            ar = f"tl.arange(0, {shape[a]})"
            em.line(f"{n} = {ar if origin == '0' else f'{origin} + {ar}'}")
            need, lower = flags[a], True
        offs.append(n)
        if need:
            if need == GUARD and a != axis:
                parts.append(tile_guard(em, tensor, a, index[a], shape[a]))
            m = em.fresh(f"{tensor}_in{a}")
            em.line(f"{m} = {axis_mask(em, tensor, a, n, lower)}")
            parts.append(expand(m, a, rank))
    ptrs = _pointers(em, tensor, offs)
    pad = literal(fold_value(op.attrs["padding"], op.result.dtype), op.result.dtype)
    em.bind(op.result, f"tl.load({ptrs}, mask={' & '.join(parts)}, other={pad})", f"{tensor}_rows")


def _scatter_compare(em: Emitter, k: int, n: str, ix, pos: str, src: str, keep: str) -> None:
    """keep &= no other entry of the index names the same row, K entries a trip."""
    c, other, same = em.fresh("scatter_chunk"), em.fresh("scatter_other"), em.fresh("scatter_same")
    em.line(f"for {c} in range(0, {n}, {k}):")
    em.enter()
    em.line(f"{other} = {c} + tl.arange(0, {k})")
    em.line(f"{same} = (({pos}[:, None] == tl.load({ix.ptr} + {other} * {ix.strides[0]}, mask={other} < {n}, "
            f"other=-1).to(tl.int64)[None, :]) & ({other}[None, :] != {src}[:, None]) & ({other}[None, :] < {n}))")
    em.line(f"{keep} = {keep} & (tl.max({same}.to(tl.int32), axis=1) == 0)")
    em.leave()


def emit_scatter(em: Emitter, op: Op) -> None:
    """Row i of the tile to row rows[start + i], masked to the entries that are in range and
    unique (lang/scatter.py): every other entry of `rows` is compared, K at a time, so no two
    blocks ever write one row and no row outside the output is touched."""
    z, value, rows, index = op.args[0], op.args[1], op.args[2], op.args[3:]
    tensor, itensor = em.tensor_name(z), em.tensor_name(rows)
    shape, rank = tuple(value.shape), len(value.shape)
    r, n, ix = shape[0], em.tensors[itensor].extents[0], em.tensors[itensor]
    src, pos, keep = em.fresh("scatter_src"), em.fresh("scatter_rows"), em.fresh("scatter_keep")
    em.line(f"{src} = {scaled(index_expr(em, index[0]), r)} + tl.arange(0, {r})")
    em.line(f"{pos} = tl.load({ix.ptr} + {src} * {ix.strides[0]}, mask={src} < {n}, other=-1).to(tl.int64)")
    em.line(f"{keep} = ({src} < {n}) & ({pos} >= 0) & ({pos} < {em.tensors[tensor].extents[0]})")
    # Entries compared per trip, (R, K) at once. A short index (a decode step's few slots)
    # takes one trip of 64-128; a long one (a prefill's 2048 slots in 8-row tiles) up to 4096
    # pairs a trip: 4 trips instead of 32 (the trips are latency-bound: paged_kv_write ran at
    # ~130 GB/s on the H200 with K = 64).
    narrow = min(max(r, 64), 128)
    wide = max(narrow, min(1024, 4096 // r))
    if wide > narrow:
        em.line(f"if {n} <= {narrow}:")
        em.enter()
    _scatter_compare(em, narrow, n, ix, pos, src, keep)
    if wide > narrow:
        em.leave()
        em.line("else:")
        em.enter()
        _scatter_compare(em, wide, n, ix, pos, src, keep)
        em.leave()
    offs, parts = [], [expand(keep, 0, rank)]
    flags = access_flags(em, op, rank)                               # axes 1..: the bounds plan's
    for a in range(rank):
        o = em.fresh(f"{tensor}_offs{a}")
        if a == 0:
            em.line(f"{o} = tl.where({keep}, {pos}, 0)")
        else:
            origin = scaled(index_expr(em, index[a]), shape[a])
            ar = f"tl.arange(0, {shape[a]})"
            em.line(f"{o} = {ar if origin == '0' else f'{origin} + {ar}'}")
            if flags[a]:
                if flags[a] == GUARD:
                    parts.append(tile_guard(em, tensor, a, index[a], shape[a]))
                m = em.fresh(f"{tensor}_in{a}")
                em.line(f"{m} = {axis_mask(em, tensor, a, o, True)}")
                parts.append(expand(m, a, rank))
        offs.append(o)
    em.line(f"tl.store({_pointers(em, tensor, offs)}, {em.strong(value)}, mask={' & '.join(parts)})")


# --- tensor descriptors (TMA) -----------------------------------------------------------------
def _use_descriptor(em: Emitter, op: Op, g: TileGeometry, flags) -> bool:
    """TMA for a 2-D tile access of an eligible tensor. The copy engine bounds-checks every
    box itself: out-of-range elements of a load read as zero and those of a store are
    dropped, which is what a masked access with zero padding does. Other paddings (-inf of
    a max) and 64-bit offsets (TMA coordinates are 32-bit) stay on pointers."""
    if g.tensor not in em.descriptors or not 2 <= len(g.shape) <= 5 or (any(flags) and em.wide):
        return False
    if GUARD in flags:   # the box's 32-bit coordinates would wrap
        return False
    if op.attrs.get("mode") == "member":   # ordered by the ticket's acquire: the generic proxy only
        return False
    if any(flags) and op.opcode == "load" and not _zero(fold_value(op.attrs["padding"], op.result.dtype)):
        return False
    inner = g.shape[0] if g.tensor in em.column_major else g.shape[-1]   # the contiguous axis of the box
    return inner * op.args[0].dtype.itemsize >= 16 and all(s <= 256 for s in g.shape)


def _zero(v) -> bool:
    """+0 exactly (TMA fills with +0.0, not -0.0)."""
    return v == 0 and math.copysign(1.0, float(v)) > 0


def _descriptor(em: Emitter, g: TileGeometry, dtype) -> str:
    """The kernel argument holding `g.tensor`'s descriptor for boxes of `g.shape`: built on
    the host at launch (see `ArgSlot`), so it reaches the kernel as a parameter and no block
    spends time building one (measured on the H200: 4-6% on large GEMMs)."""
    key = (g.tensor, g.shape)
    name = em.desc_names.get(key)
    if name is None:
        name = em.fresh(f"{g.tensor}_desc")
        em.desc_names[key] = name
        box = g.shape[::-1] if g.tensor in em.column_major else g.shape   # a transpose's boxes are too
        em.desc_slots.append(ArgSlot(name, g.tensor, "desc", dtype=dtype, box=tuple(box)))
    return name


# --- unsafe pointer ops -----------------------------------------------------------------------
def _flat(em: Emitter, op: Op, masked: bool, mask_index: int) -> tuple[str, str, str]:
    """(pointers, mask) for an unsafe access; out-of-range offsets are dropped like the interpreter."""
    names = em.tensors[em.tensor_name(op.args[0])]
    offs = em.fresh("offs")
    src = op.args[1]
    # tl.cast: a scalar offset may be a Python int under the interpreter (no `.to`)
    em.line(f"{offs} = tl.cast({em.strong(src)}, tl.int64)" if em.wide else f"{offs} = {em.strong(src)}")
    m = em.fresh("ok")
    inb = f"({offs} >= 0) & ({offs} < {names.numel})"
    em.line(f"{m} = {inb} & {em.ref(op.args[mask_index])}" if masked else f"{m} = {inb}")
    return f"{names.ptr} + {offs}", m, offs


def emit_load_ptr(em: Emitter, op: Op) -> None:
    ptrs, m, _ = _flat(em, op, op.attrs["masked"], 2)
    d = op.result.dtype
    em.bind(op.result, f"tl.load({ptrs}, mask={m}, other={literal(fold_value(op.attrs['other'], d), d)})", "val")


def emit_store_ptr(em: Emitter, op: Op) -> None:
    ptrs, m, _ = _flat(em, op, op.attrs["masked"], 3)
    em.line(f"tl.store({ptrs}, {em.strong(op.args[2])}, mask={m})")


def _dense(em: Emitter, v) -> str:
    """`v` times one: the compiler folds it away, and Triton 3.6's interpreter, whose atomics
    misread stride-0 (broadcast) arrays, gets a fresh dense array."""
    return f"{em.strong(v)} * {'1.0' if v.dtype.is_float else '1'}"


def emit_atomic(em: Emitter, op: Op) -> None:
    ptrs, m, _ = _flat(em, op, op.attrs["masked"], 3)
    fn = {"add": "tl.atomic_add", "max": "tl.atomic_max", "min": "tl.atomic_min"}[op.attrs["op"]]
    old = em.fresh("old")
    em.line(f"{old} = {fn}({ptrs}, {_dense(em, op.args[2])}, mask={m})")
    em.bind(op.result, f"tl.where({m}, {old}, 0)", "old")


def emit_atomic_cas(em: Emitter, op: Op) -> None:
    """tl.atomic_cas has no mask: an out-of-range lane compares-and-swaps element 0 with
    itself (writing back what it compared equal to changes nothing) and reports 0."""
    names = em.tensors[em.tensor_name(op.args[0])]
    _, m, offs = _flat(em, op, False, 0)
    cmp, val = _dense(em, op.args[2]), _dense(em, op.args[3])
    old = em.fresh("old")
    em.line(f"{old} = tl.atomic_cas({names.ptr} + tl.where({m}, {offs}, 0), {cmp}, tl.where({m}, {val}, {cmp}))")
    em.bind(op.result, f"tl.where({m}, {old}, 0)", "old")


# --- S16: the ticket of `ts.last_arrival()` --------------------------------------------------
def emit_arrive(em: Emitter, op: Op) -> None:
    """Every thread's stores are issued (barrier), then one acquire-release atomic at GPU
    scope takes the group's ticket: the block that draws the last one sees every member's
    stores, and resets the counter for the next launch (all members have drawn theirs)."""
    rank = em.fn.grid_rank
    terms = []
    for a in range(1, rank):
        later = [em.num_blocks(b) for b in range(a + 1, rank)]
        terms.append(" * ".join([em.pid(a)] + later))
    slot = f"{em.arrivals} + {' + '.join(terms) if terms else '0'}"
    ticket, last = em.fresh("ticket"), em.fresh("last")
    em.line("tl.debug_barrier()   # S16: this block's stores are issued before its ticket")
    em.line(f'{ticket} = tl.atomic_add({slot}, 1, sem="acq_rel", scope="gpu")')
    em.line(f"{last} = {ticket} == {em.num_blocks(0)} - 1")
    em.line(f"tl.store({slot}, 0, mask={last})   # the whole group has arrived: reset for the next launch")
    em.bind(op.result, last, "last")


# --- S15 ----------------------------------------------------------------------------------------
def barrier_loads(fn: Function) -> set[int]:
    """ids of output loads that may read elements this block stored earlier (in program order,
    or in an earlier iteration of an enclosing loop)."""
    out: set[int] = set()

    def stores_in(block: Block) -> set[int]:
        from ...lang.ir import walk
        return {id(op.args[0]) for op in walk(block) if op.opcode == "store"}

    def visit(block: Block, stored: set, in_loop: frozenset) -> None:
        for op in block.ops:
            if op.opcode == "load" and op.args[0].type.tile is not None and op.attrs["mode"] != "member":
                # (member loads follow the ticket, whose barrier orders them: emit_arrive)
                if id(op.args[0]) in stored or id(op.args[0]) in in_loop:
                    out.add(id(op))
            elif op.opcode == "store":
                stored.add(id(op.args[0]))
            inner = in_loop
            if op.opcode in _LOOPS:
                inner = in_loop | frozenset().union(*(stores_in(r) for r in op.regions))
            for r in op.regions:
                visit(r, stored, inner)

    visit(fn.body, set(), frozenset())
    return out


EMITTERS = {
    "load": emit_load, "store": emit_store, "valid": emit_valid, "gather": emit_gather, "scatter": emit_scatter,
    "load_ptr": emit_load_ptr, "store_ptr": emit_store_ptr, "atomic": emit_atomic, "atomic_cas": emit_atomic_cas,
    "arrive": emit_arrive,
}

