"""Triton emitters for control flow: `for`, `if`, `while`, and the `tiles` / `subtiles` walks.

Region arguments and op results become plain Python variables that Triton turns into
loop-carried values or branch results: a loop's carried variables are assigned before it and
re-assigned from its `yield` at the end of each iteration; both branches of an `if` assign
the same result variables. Scalars stored in such variables are typed (`Emitter.carried`),
since Triton refuses a variable that is a constexpr before a loop and a tensor inside it.

`tiles` becomes the persistent loop
    for t in tl.range(tl.program_id(0), total, tl.num_programs(0), flatten=True):
with tile number -> coordinates exactly as `lang/tile_order.tile_coords` (grouped rows);
a `within=` window walks max(0, count) tiles per axis from its start. `subtiles` becomes
nested `tl.static_range` loops (unrolled: the sub-tile count is static).
"""
from __future__ import annotations

from ...lang.ir import Op
from .emitter import Emitter


def _start_carried(em: Emitter, op: Op, inits) -> list[str]:
    """Variables for a region's carried values, initialised from `inits`."""
    body = op.regions[0]
    carried_args = body.args[len(body.args) - len(inits):]
    names = [em.fresh(a.name or "carry") for a in carried_args]
    for n, v in zip(names, inits):
        em.line(f"{n} = {em.carried(v)}")
    return names


def _finish(em: Emitter, op: Op, names: list[str]) -> None:
    for r, n in zip(op.results, names):
        em.alias(r, n)


def emit_for(em: Emitter, op: Op) -> None:
    lo, hi, step, *inits = op.args
    names = _start_carried(em, op, inits)
    body = op.regions[0]
    iv = em.fresh(body.args[0].name or "i")
    em.line(f"for {iv} in range({em.ref(lo)}, {em.ref(hi)}, {em.ref(step)}):")
    em.enter()
    start = len(em.lines)
    yielded = em.emit_region(body, [iv] + names)
    em.assign(names, yielded)
    em.body(start)
    em.leave()
    _finish(em, op, names)


def emit_if(em: Emitter, op: Op) -> None:
    names = [em.fresh(r.name or "res") for r in op.results]
    em.line(f"if {em.ref(op.args[0])}:")
    for k, region in enumerate(op.regions):
        if k == 1:
            em.line("else:")
        em.enter()
        start = len(em.lines)
        yielded = em.emit_block(region)
        em.assign(names, yielded)
        em.body(start)
        em.leave()
    _finish(em, op, names)


def emit_while(em: Emitter, op: Op) -> None:
    """The `before` region (which computes the condition) runs ahead of the loop and again
    at the end of every iteration, so Triton sees `while cond:` on a plain variable."""
    before, body = op.regions
    names = [em.fresh(a.name or "carry") for a in before.args]
    for n, v in zip(names, op.args):
        em.line(f"{n} = {em.carried(v)}")
    cond = em.fresh("go")

    def condition():
        em.enter(indent=False)   # its names change each iteration: never reuse them after
        got, *rest = em.emit_region(before, names)
        em.assign(names, rest)
        em.line(f"{cond} = {em.carried(got)}")
        em.leave(indent=False)

    condition()
    em.line(f"while {cond}:")
    em.enter()     # never empty: the condition is recomputed at the end
    yielded = em.emit_region(body, names)
    em.assign(names, yielded)
    condition()
    em.leave()
    _finish(em, op, names)


def emit_tiles(em: Emitter, op: Op) -> None:
    out, rank, group = op.attrs["output"], op.attrs["rank"], op.attrs["group"]
    tile = em.fn.param(out).value.type.tile
    windowed = op.attrs["windowed"]
    bounds = op.args[:2 * rank] if windowed else ()
    inits = op.args[2 * rank:] if windowed else op.args
    walk = []
    for a in range(rank):
        n = em.fresh(f"{out}_walk{a}")
        if windowed:
            em.line(f"{n} = tl.maximum({em.strong(bounds[2 * a + 1])}, 0)")
        else:
            ext = em.tensors[out].extents[a]
            em.line(f"{n} = ({ext} + {tile[a] - 1}) // {tile[a]}")
        walk.append(n)
    total = em.fresh(f"{out}_tiles")
    em.line(f"{total} = {' * '.join(walk)}")
    names = _start_carried(em, op, inits)
    t = em.fresh("tile_id")
    start = "tl.program_id(0)"
    if op.attrs.get("first", 0):             # block `first` takes tile 0: the blocks rotated
        start = em.fresh("walk_start")
        em.line(f"{start} = (tl.program_id(0) + tl.num_programs(0) - {op.attrs['first']} % tl.num_programs(0)) "
                "% tl.num_programs(0)")
    em.line(f"for {t} in tl.range({start}, {total}, tl.num_programs(0), flatten=True):")
    em.enter()     # never empty: the coordinates are computed first
    coords = _tile_coords(em, t, walk, group)
    if windowed:
        coords = [f"{c} + {em.strong(bounds[2 * a])}" for a, c in enumerate(coords)]
    idx = []
    for a, c in enumerate(coords):
        n = em.fresh(op.regions[0].args[a].name or f"idx{a}")
        em.line(f"{n} = {c}")
        idx.append(n)
    yielded = em.emit_region(op.regions[0], idx + names)
    em.assign(names, yielded)
    em.leave()
    _finish(em, op, names)


def _tile_coords(em: Emitter, t: str, walk: list[str], group: int) -> list[str]:
    """tile_order.tile_coords, written out (every quantity is >= 0, so // and % floor)."""
    if len(walk) == 1:
        return [t]
    if len(walk) == 3:
        per_batch, rest = em.fresh("per_batch"), em.fresh("t_in_batch")
        em.line(f"{per_batch} = {walk[1]} * {walk[2]}")
        em.line(f"{rest} = {t} % {per_batch}")
        return [f"{t} // {per_batch}"] + _tile_coords(em, rest, walk[1:], group)
    rows, cols = walk
    if group == 1:
        return [f"{t} // {cols}", f"{t} % {cols}"]
    per_group, first, rows_here, within = (em.fresh(h) for h in ("per_group", "first_row", "group_rows", "within"))
    em.line(f"{per_group} = {group} * {cols}")
    em.line(f"{first} = ({t} // {per_group}) * {group}")
    em.line(f"{rows_here} = tl.minimum({rows} - {first}, {group})")
    em.line(f"{within} = {t} % {per_group}")
    return [f"{first} + {within} % {rows_here}", f"{within} // {rows_here}"]


def emit_subtiles(em: Emitter, op: Op) -> None:
    counts = [t // s for t, s in zip(op.attrs["tile"], op.attrs["shape"])]
    names = _start_carried(em, op, op.args)
    body = op.regions[0]
    idx = []
    for a, c in enumerate(counts):
        n = em.fresh(body.args[a].name or f"j{a}")
        em.line(f"for {n} in tl.static_range({c}):")
        em.enter()
        idx.append(n)
    start = len(em.lines)
    yielded = em.emit_region(body, idx + names, weak=[True] * len(idx))
    em.assign(names, yielded)
    em.body(start)
    for _ in counts:
        em.leave()
    _finish(em, op, names)


EMITTERS = {"for": emit_for, "if": emit_if, "while": emit_while, "tiles": emit_tiles, "subtiles": emit_subtiles}
