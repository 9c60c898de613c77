"""`for j in z.scatter(rows)`: a `ts.MutTiles` output written at rows named by an index tensor.

A paged KV cache is written through a slot mapping: source row i goes to cache row
`rows[i]`. S1 forbids a block to write where it does not own; the scatter walk makes that
ownership exact instead:
  * the walk mints indices over the *source* tiles — (tile of `rows`, then the output's tiles
    along axes 1..) — each visited by exactly one block, as `z.tiles()` visits output tiles;
  * `z.store(tile, j)` writes source row i of the tile to output row `rows[i]`, and only
    where that row is this source row's alone: an entry outside [0, extent) of the output's
    axis 0, or equal to another entry of `rows`, writes nothing (a negative entry is how a
    caller says "no row", as vLLM's padded slot -1). The store computes this itself on the
    device, on every backend, so no launch can write out of bounds or race — whatever the
    index values, inside a CUDA graph too;
  * a scatter output is never read in the kernel that scatters to it (other blocks may be
    writing any of its rows), and it has one walk like any output.
`ts.check_scatter_index(rows, n)` checks the values on the host before a launch (eager
launches that want an error instead of dropped rows); `kernels.paged_kv.scatter_check` flags
the dropped entries on the device for a check after a graph replay.
"""
from __future__ import annotations

from .. import dtypes as dt
from .annotations import MUT_TILES, REF
from . import typing_rules as rules
from .builder import PY_SCALARS, Builder, describe
from .calls import first_block, tile
from .ir import TileType
from .objects import MintedIndex, TensorArg


def scatter_walk(b: Builder, call, z: TensorArg, args, kwargs):
    """The walk's window over the source tiles; returns (attrs, window values, rank, rows)."""
    if z.kind != MUT_TILES:
        raise b.error(call, f"`{z.name}.scatter(rows)` writes a ts.MutTiles output; `{z.name}` is {z.kind_name}",
                      help=f"declare `{z.name}: ts.MutTiles[dtype, tile]` and pass it partitioned by its tile")
    kwargs = dict(kwargs)
    first = {"first": kwargs.pop("first")} if "first" in kwargs else {}
    if len(args) + len(kwargs) != 1 or (kwargs and "rows" not in kwargs):
        raise b.error(call, f"`{z.name}.scatter(rows)` takes one argument: the index tensor of output rows "
                            "(and first=)",
                      help=f"`for j in {z.name}.scatter(rows):` or `{z.name}.scatter(rows, first=F)`, F the block "
                           "that takes the first tile")
    rows = args[0] if args else kwargs["rows"]
    if not isinstance(rows, TensorArg) or rows.kind != REF or rows.rank != 1 or not rows.dtype.is_int:
        raise b.error(call, f"the rows of `{z.name}.scatter(rows)` must be a 1-D integer ts.Ref, got {_what(rows)}",
                      help="pass the index tensor as a parameter `rows: ts.Ref[ts.i32, (\"N\",)]`")
    if z.walks:
        raise b.error(call, f"`{z.name}` is already walked at line {z.walks[0].line}; an output has one walk",
                      help="a second walk could write the same rows twice")
    if b.loop_depth:
        raise b.error(call, f"`{z.name}.scatter(rows)` cannot be nested inside another loop",
                      help="each enclosing iteration would write every row again")
    z.walks.append(b.src.loc(call))
    i32 = TileType((), dt.i32)
    counts = [b.emit1("num_tiles", (rows.value,), i32, {"axis": 0, "tile": z.tile[0]})]
    counts += [b.emit1("num_tiles", (z.value,), i32, {"axis": a, "tile": z.tile[a]}) for a in range(1, z.rank)]
    window = []
    for c in counts:
        window += [b.const(0, dt.i32), c]
    attrs = {"output": z.name, "group": 1, "windowed": True, "rank": z.rank, "first": first_block(b, call, first)}
    return attrs, tuple(window), z.rank, rows


def scatter_store(b: Builder, node, z: TensorArg, value, j: MintedIndex) -> None:
    """`z.store(tile, j)` with an index minted by `z.scatter(rows)`."""
    if j.brand is not z:
        raise b.error(node, f"this index was minted by `{j.brand.name}.scatter()` and cannot index `{z.name}`",
                      help=f"store to `{j.brand.name}` with it")
    v = b.const(value, z.dtype) if isinstance(value, PY_SCALARS) else tile(b, node, value, "stored value")
    if v.dtype != z.dtype:
        raise b.error(node, f"cannot store a {v.dtype.name} tile to `{z.name}` ({z.dtype.name})",
                      help=f"convert it first: ts.astype(t, ts.{z.dtype.name})")
    if v.shape != z.tile:
        try:
            ok = rules.broadcast_shapes(v.shape, z.tile) == z.tile
        except rules.TypingError:
            ok = False
        if not ok:
            raise b.error(node, f"the stored tile is {v.type}, but `{z.name}`'s tile is {z.tile}",
                          help="store a tile of exactly the output's tile shape")
        v = b.broadcast(v, z.tile, materialize=True)
    b.emit("scatter", (z.value, v, j.rows.value, *j.values), (), {})


def refuse_read(b: Builder, node, z: TensorArg, j: MintedIndex) -> None:
    raise b.error(node, f"`{z.name}` is written by `{z.name}.scatter({j.rows.name})` and cannot be read in the "
                        "same kernel",
                  help="other blocks may be writing any of its rows; read it in a later launch")


def _what(x) -> str:
    if isinstance(x, TensorArg):
        return f"`{x.name}` ({x.kind_name}, rank {x.rank}, {x.dtype.name})"
    return describe(x)
