"""`for idx in z.tiles(...)` and `for j in z.subtiles(shape)`: loops that mint tile indices.

The index a walk yields is the only thing a `MutTiles` store (or a sub-tile store) accepts,
so every tile is written by exactly one block: one `tiles()` walk per output, never nested
in another loop (S1). Windows (`within=`) restrict the walk; writes outside the tensor are
masked.
"""
from __future__ import annotations

import ast

from .. import dtypes as dt
from .annotations import MUT, MUT_TILES, REF
from .builder import Builder, describe
from .calls import first_block, static_int, static_shape
from .expressions import lower_expr
from .ir import TileType, Value
from .memory import emit_load
from .objects import MintedIndex, TensorArg
from .regions import carried_names, materialize, run_region
from .scatter import scatter_walk


def lower_walk(b: Builder, node: ast.For, z: TensorArg, kind: str, call: ast.Call) -> None:
    if not isinstance(node.target, ast.Name):
        raise b.error(node.target, f"bind the index of `{z.name}.{kind}()` to one name: `for idx in ...`")
    args = [lower_expr(b, a) for a in call.args]
    kwargs = {k.arg: lower_expr(b, k.value) for k in call.keywords}
    rows = None
    if kind == "tiles":
        attrs, window_values, rank, sub = _tiles_walk(b, call, z, args, kwargs)
    elif kind == "scatter":   # a windowed walk over the source tiles (scatter.py)
        attrs, window_values, rank, rows = scatter_walk(b, call, z, args, kwargs)
        sub = None
    else:
        attrs, window_values, rank, sub = _subtiles_walk(b, call, z, args, kwargs)
    name = node.target.id
    carried = carried_names(b, node.body, exclude=(name,))
    inits = [materialize(b, b.env[n]) for n in carried]
    idx_values = tuple(Value(TileType((), dt.i32), f"{name}{a}") for a in range(rank))
    region_args = list(idx_values) + [Value(v.type, n) for n, v in zip(carried, inits)]
    minted = MintedIndex(z, kind, idx_values, sub, rows)

    def bind(env):
        env[name] = minted
        env.update(zip(carried, region_args[rank:]))

    b.loop_depth += 1
    try:
        body = run_region(b, region_args, bind, node.body, carried, node)
    finally:
        b.loop_depth -= 1
    opcode = "tiles" if kind == "scatter" else kind       # a scatter is a windowed tiles walk
    results = b.emit(opcode, (*window_values, *inits), [v.type for v in inits], attrs, (body,), b.src.loc(node))
    for n, v in zip(carried, results):
        b.env[n] = v


def _tiles_walk(b: Builder, call, z: TensorArg, args, kwargs):
    if z.kind != MUT_TILES:
        raise b.error(call, f"`{z.name}.tiles()` walks a ts.MutTiles output; `{z.name}` is {z.kind_name}",
                      help="a ts.Mut output is stored by its own block with `z.store(tile)`")
    if args or set(kwargs) - {"group", "within", "first"}:
        raise b.error(call, "z.tiles() takes only the keywords group=, within= and first=",
                      help="group=g orders tiles in groups of g rows, within=((start, count), ...) walks a window, "
                           "first=F names the block that takes tile 0")
    if z.walks:
        raise b.error(call, f"`{z.name}` is already walked at line {z.walks[0].line}; an output has one walk",
                      help="a second walk could write the same tiles twice")
    if b.loop_depth:
        raise b.error(call, f"`{z.name}.tiles()` cannot be nested inside another loop",
                      help="each enclosing iteration would write every tile again")
    z.walks.append(b.src.loc(call))
    group = static_int(b, call, kwargs.get("group", 1), "group")
    if group < 1:
        raise b.error(call, "group must be >= 1")
    window = kwargs.get("within")
    values = ()
    if window is not None:
        values = _window(b, call, z, window)
    return {"output": z.name, "group": group, "windowed": window is not None, "rank": z.rank,
            "first": first_block(b, call, kwargs)}, values, z.rank, None


def _window(b: Builder, call, z: TensorArg, window) -> tuple[Value, ...]:
    if not isinstance(window, tuple) or len(window) != z.rank:
        raise b.error(call, f"within= takes one (start, count) pair per axis of `{z.name}` ({z.rank})")
    out = []
    for pair in window:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise b.error(call, "each entry of within= is a (start, count) pair, counted in tiles")
        for bound in pair:
            out.append(_window_bound(b, call, bound))
    return tuple(out)


def _window_bound(b: Builder, call, bound) -> Value:
    if isinstance(bound, TensorArg):
        if bound.kind != REF or bound.rank != 1 or not bound.dtype.is_int:
            raise b.error(call, f"a window bound tensor must be a 1-element integer ts.Ref, got `{bound.name}`")
        t = emit_load(b, call, bound, (b.const(0),), (1,), 0, "tile")
        return b.cast(b.emit1("reshape", (t,), TileType((), bound.dtype), {"shape": ()}), dt.i32)
    if isinstance(bound, (int, Value)) and not isinstance(bound, bool):
        v = b.as_value(bound)
        if v.shape != () or not v.dtype.is_int:
            raise b.error(call, f"window bounds are integer scalars, got {v.type}")
        return b.cast(v, dt.i32)
    raise b.error(call, f"window bounds are ints, runtime scalars or 1-element tensors, got {describe(bound)}")


def _subtiles_walk(b: Builder, call, z: TensorArg, args, kwargs):
    if z.kind != MUT:
        raise b.error(call, f"`{z.name}.subtiles(shape)` walks a ts.Mut output's block tile; "
                            f"`{z.name}` is {z.kind_name}")
    if len(args) + len(kwargs) != 1:
        raise b.error(call, "z.subtiles(shape) takes one argument: the sub-tile shape")
    shape = static_shape(b, call, args[0] if args else kwargs.get("shape"), "sub-tile shape")
    if len(shape) != z.rank or any(t % s for t, s in zip(z.tile, shape)):
        raise b.error(call, f"the sub-tile {shape} must have rank {z.rank} and divide the tile {z.tile}")
    return {"output": z.name, "shape": shape, "tile": z.tile}, (), z.rank, shape

