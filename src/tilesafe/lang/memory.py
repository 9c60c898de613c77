"""Memory operations: tile-space loads, stores, gathers, and unsafe pointer access.

This is where the access discipline is enforced as the IR is built: a `Ref` is never
stored to (S2); an output is stored only at its block's own tile or at an index minted by
its own walk (S1); pointers and atomics exist only in unsafe kernels (S4).
"""
from __future__ import annotations

from .. import dtypes as dt
from . import stubs
from . import typing_rules as rules
from .annotations import MUT, MUT_LAST, MUT_TILES, PTR, REF
from .arrival_rules import check_final, check_store, misplaced
from .builder import PY_SCALARS, Builder, describe
from .calls import REGISTRY, axis_arg, static_shape, tile
from .ir import TileType, Value
from .objects import MintedIndex, RefView, TensorArg
from .scatter import refuse_read, scatter_store


def tensor_arg(b: Builder, node, x, what: str) -> TensorArg:
    if not isinstance(x, TensorArg):
        raise b.error(node, f"{what} must be a tensor parameter, got {describe(x)}")
    return x


def index_values(b: Builder, node, index, rank: int) -> tuple[Value, ...]:
    """A tile index (ints, scalar Values or a minted index) as i32/i64 scalar Values."""
    if isinstance(index, MintedIndex):
        index = index.values
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) != rank:
        raise b.error(node, f"the index has {len(index)} coordinate(s) but the tensor has rank {rank}")
    out = []
    for i in index:
        if isinstance(i, bool) or not isinstance(i, (int, Value)):
            raise b.error(node, f"tile indices are integers, got {describe(i)}")
        v = b.as_value(i)
        if v.shape != () or not v.dtype.is_int:
            raise b.error(node, f"tile indices are integer scalars, got a {v.type} tile")
        out.append(v)
    return tuple(out)


def padding_value(b: Builder, node, padding):
    if not isinstance(padding, PY_SCALARS):
        raise b.error(node, f"padding must be a compile-time number, got {describe(padding)}")
    return padding


def _readable(b: Builder, node, x: TensorArg, how: str) -> None:
    if x.kind == PTR:
        raise b.error(node, f"`{x.name}` is a ts.Ptr; read it with ts.load_ptr in an unsafe kernel")
    if x.kind != REF:
        raise b.error(node, f"{how} reads a ts.Ref; `{x.name}` is an output ({x.kind_name})",
                      help=f"read the block's own tile with `{x.name}.load()`; other blocks' tiles of an "
                           "output are not readable (they may be written concurrently)")


def emit_load(b: Builder, node, x: TensorArg, index, shape, padding, mode: str, owner: TensorArg | None = None,
              sub=None) -> Value:
    dtype = x.dtype
    attrs = {"shape": shape, "padding": padding, "mode": mode}
    if owner is not None:
        attrs["owner"] = owner.name
    if sub is not None:
        attrs["sub"] = sub
    v = b.emit1("load", (x.value, *index), TileType(shape, dtype), attrs)
    b.loads[id(v)] = b.block.ops[-1]
    return v


def load(b: Builder, node, x, index, shape, padding=0):
    x = tensor_arg(b, node, x, "the first argument of ts.load")
    _readable(b, node, x, "ts.load")
    shape = static_shape(b, node, shape)
    if len(shape) != x.rank:
        raise b.error(node, f"the tile shape {shape} has rank {len(shape)}, but `{x.name}` has rank {x.rank}")
    return emit_load(b, node, x, index_values(b, node, index, x.rank), shape, padding_value(b, node, padding), "tile")


def load_tile_like(b: Builder, node, x, out, padding=0):
    x = tensor_arg(b, node, x, "the first argument of ts.load_tile_like")
    out = tensor_arg(b, node, out, "the second argument of ts.load_tile_like")
    _readable(b, node, x, "ts.load_tile_like")
    if out.kind != MUT:
        raise b.error(node, f"ts.load_tile_like follows a ts.Mut output's block tile; `{out.name}` is {out.kind_name}",
                      help="in a persistent kernel use ts.load(x, idx, shape=z.tile_shape) with a minted idx")
    if x.rank != out.rank:
        raise b.error(node, f"`{x.name}` has rank {x.rank} but `{out.name}` has rank {out.rank}")
    return emit_load(b, node, x, (), out.tile, padding_value(b, node, padding), "block", owner=out)


def load_own(b: Builder, node, z: TensorArg, idx=None, padding=0):
    """`z.load()` / `z.load(j)`: a block reads (back) its own output tile."""
    padding = padding_value(b, node, padding)
    if isinstance(idx, MintedIndex) and idx.kind == "scatter":
        refuse_read(b, node, z, idx)
    if z.kind == MUT:
        if idx is None:
            return emit_load(b, node, z, (), z.tile, padding, "block", owner=z)
        if isinstance(idx, MintedIndex) and idx.kind == "members":
            return member_load(b, node, z, idx, padding)
        j = _minted(b, node, z, idx, "subtiles")
        return emit_load(b, node, z, j.values, j.sub, padding, "subtile", owner=z, sub=j.sub)
    if z.kind == MUT_TILES:
        j = _minted(b, node, z, idx, "tiles")
        return emit_load(b, node, z, j.values, z.tile, padding, "tile", owner=z)
    if z.kind == MUT_LAST:
        raise b.error(node, f"`{z.name}` is a ts.MutLast output, written once by the group's last block; "
                            "it is not read back",
                      help="keep the stored value in a variable")
    raise b.error(node, f"`{z.name}.load()` reads an output's own tile; `{z.name}` is {z.kind_name}",
                  help="read a ts.Ref with ts.load(x, index, shape=...) or x.partition(tile).load(index)")


def member_load(b: Builder, node, z: TensorArg, idx: MintedIndex, padding):
    """`z.load(s)`: member s's tile of `z`. The ts.Mut outputs share the grid, so an index
    minted by one output's `members()` walk names a member of every one of them."""
    check_final(b, node, z)
    return emit_load(b, node, z, idx.values, z.tile, padding, "member", owner=z)


def store(b: Builder, node, z, value, idx=None):
    z = tensor_arg(b, node, z, "the stored-to object")
    if z.kind == REF:
        raise b.error(node.func if hasattr(node, "func") else node,
                      f"cannot store to `{z.name}`: it is a read-only input (ts.Ref)",
                      help="write results through the kernel's ts.Mut output")
    if z.kind == PTR:
        raise b.error(node, f"`{z.name}` is a ts.Ptr; write it with ts.store_ptr in an unsafe kernel")
    if isinstance(idx, MintedIndex) and idx.kind == "scatter":
        return scatter_store(b, node, z, value, idx)
    check_store(b, node, z, idx)
    if z.kind == MUT_LAST:
        mode, index, shape, sub = "group", (), z.tile, None
    elif z.kind == MUT:
        if idx is None:
            mode, index, shape, sub = "block", (), z.tile, None
        else:
            j = _minted(b, node, z, idx, "subtiles")
            mode, index, shape, sub = "subtile", j.values, j.sub, j.sub
    else:
        if idx is None:
            raise b.error(node, f"`{z.name}` is a ts.MutTiles output: store at an index minted by its walk",
                          help=f"for idx in {z.name}.tiles(): ... {z.name}.store(tile, idx)")
        j = _minted(b, node, z, idx, "tiles")
        mode, index, shape, sub = "tile", j.values, z.tile, None
    v = tile(b, node, value, "stored value")
    if isinstance(value, PY_SCALARS):
        v = b.const(value, z.dtype)
    if v.dtype != z.dtype:
        raise b.error(node, f"cannot store a {v.dtype.name} tile to `{z.name}` ({z.dtype.name})",
                      help=f"convert it first: ts.astype(t, ts.{z.dtype.name})")
    if v.shape != shape:
        try:
            if rules.broadcast_shapes(v.shape, shape) != shape:
                raise rules.TypingError("")
        except Exception:
            raise b.error(node, f"the stored tile is {v.type}, but `{z.name}`'s tile is {shape}",
                          help="store a tile of exactly the output's tile shape") from None
        v = b.broadcast(v, shape, materialize=True)
    attrs = {"mode": mode}
    if sub is not None:
        attrs["sub"] = sub
    b.emit("store", (z.value, v, *index), (), attrs)
    return None


def _minted(b: Builder, node, z: TensorArg, idx, kind: str) -> MintedIndex:
    walk = f"{z.name}.tiles()" if kind == "tiles" else f"{z.name}.subtiles(shape)"
    if not isinstance(idx, MintedIndex):
        raise b.error(node, f"`{z.name}` can only be indexed by an index minted by `for idx in {walk}`, "
                            f"not by {describe(idx)}",
                      help="indices are unforgeable so that no two blocks write the same tile; "
                           f"loop with `for idx in {walk}`")
    if idx.brand is not z or idx.kind != kind:
        raise b.error(node, f"this index was minted by `{idx.brand.name}.{idx.kind}()` and cannot index `{z.name}`",
                      help=f"store to `{idx.brand.name}` with it, or walk `{walk}`")
    return idx


def partition_view(b: Builder, node, x: TensorArg, tile_shape) -> RefView:
    if x.kind != REF:
        raise b.error(node, f"`{x.name}.partition(...)` makes a read-only view of a ts.Ref; `{x.name}` is {x.kind_name}")
    shape = static_shape(b, node, tile_shape, "partition tile")
    if len(shape) != x.rank:
        raise b.error(node, f"the partition tile {shape} has rank {len(shape)}, but `{x.name}` has rank {x.rank}")
    return RefView(x, shape)


def view_load(b: Builder, node, view: RefView, index, padding=0):
    return emit_load(b, node, view.tensor, index_values(b, node, index, view.tensor.rank), view.tile,
                     padding_value(b, node, padding), "tile")


def num_tiles(b: Builder, node, view, axis):
    if not isinstance(view, RefView):
        raise b.error(node, f"ts.num_tiles takes a partition view (x.partition(tile)), got {describe(view)}")
    axis = axis_arg(b, node, axis, view.tensor.rank)
    return b.emit1("num_tiles", (view.tensor.value,), TileType((), dt.i32), {"axis": axis, "tile": view.tile[axis]})


def extent(b: Builder, x: TensorArg, axis: int) -> Value:
    return b.emit1("extent", (x.value,), TileType((), dt.i32), {"axis": axis})


def gather(b: Builder, node, x, idx, axis=0, shape=None, index=None, padding=0):
    x = tensor_arg(b, node, x, "the first argument of ts.gather")
    _readable(b, node, x, "ts.gather")
    axis = axis_arg(b, node, axis, x.rank)
    pos = tile(b, node, idx, "index tile")
    if len(pos.shape) != 1 or not pos.dtype.is_int:
        raise b.error(node, f"ts.gather takes a 1-D integer tile of positions, got {pos.type}")
    if shape is None:
        if x.rank != 1:
            raise b.error(node, "ts.gather on a tensor of rank > 1 needs shape=")
        shape = pos.shape
    shape = static_shape(b, node, shape)
    if len(shape) != x.rank or shape[axis] != pos.shape[0]:
        raise b.error(node, f"ts.gather's shape {shape} must have rank {x.rank} and {pos.shape[0]} along axis {axis}")
    if index is None:
        index = (0,) * x.rank
    vals = index_values(b, node, index, x.rank)
    return b.emit1("gather", (x.value, pos, *vals), TileType(shape, x.dtype),
                   {"axis": axis, "shape": shape, "padding": padding_value(b, node, padding)})


def valid(b: Builder, node, tile):   # the parameter is named as in the stub, which binds the call
    op = b.loads.get(id(tile))
    if op is None:
        raise b.error(node, "ts.valid takes a tile produced by a load (ts.load, px.load, z.load())")
    return b.emit1("valid", op.args, TileType(op.results[0].shape, dt.bool_), dict(op.attrs))


# --- unsafe ------------------------------------------------------------------------------------
def _ptr(b: Builder, node, p, opname: str) -> TensorArg:
    if not b.unsafe:
        raise b.error(node, f"`ts.{opname}` is only allowed in unsafe kernels",
                      help="declare the kernel with @ts.kernel(unsafe=True) and launch it with kernel.unsafe_launch(...)")
    if not isinstance(p, TensorArg) or p.kind != PTR:
        raise b.error(node, f"ts.{opname} takes a ts.Ptr parameter, got {describe(p)}",
                      help="a ts.Ref is never written or addressed by pointer (S2)")
    return p


def _offsets(b: Builder, node, offsets) -> Value:
    v = tile(b, node, offsets, "offsets")
    if not v.dtype.is_int:
        raise b.error(node, f"pointer offsets must be integers, got {v.dtype.name}")
    return v


def _mask(b: Builder, node, mask, shape):
    if mask is None:
        return ()
    m = b.cast(tile(b, node, mask, "mask"), dt.bool_)
    return (b.broadcast(m, shape, materialize=True),)


def load_ptr(b: Builder, node, p, offsets, mask=None, other=0):
    p = _ptr(b, node, p, "load_ptr")
    off = _offsets(b, node, offsets)
    return b.emit1("load_ptr", (p.value, off, *_mask(b, node, mask, off.shape)), TileType(off.shape, p.dtype),
                   {"other": padding_value(b, node, other), "masked": mask is not None})


def store_ptr(b: Builder, node, p, offsets, values, mask=None):
    p = _ptr(b, node, p, "store_ptr")
    off = _offsets(b, node, offsets)
    v = b.broadcast(b.as_value(values, p.dtype), off.shape, materialize=True)
    b.emit("store_ptr", (p.value, off, v, *_mask(b, node, mask, off.shape)), (), {"masked": mask is not None})


def atomic(op: str):
    def handler(b: Builder, node, p, offsets, values, mask=None):
        p_ = _ptr(b, node, p, f"atomic_{op}")
        off = _offsets(b, node, offsets)
        v = b.broadcast(b.as_value(values, p_.dtype), off.shape, materialize=True)
        return b.emit1("atomic", (p_.value, off, v, *_mask(b, node, mask, off.shape)), TileType(off.shape, p_.dtype),
                       {"op": op, "masked": mask is not None})
    return handler


def atomic_cas(b: Builder, node, p, offsets, cmp, values):
    p = _ptr(b, node, p, "atomic_cas")
    off = _offsets(b, node, offsets)
    c = b.broadcast(b.as_value(cmp, p.dtype), off.shape, materialize=True)
    v = b.broadcast(b.as_value(values, p.dtype), off.shape, materialize=True)
    return b.emit1("atomic_cas", (p.value, off, c, v), TileType(off.shape, p.dtype))


def register_memory_ops() -> None:
    REGISTRY.update({
        stubs.load: load, stubs.load_tile_like: load_tile_like, stubs.gather: gather,
        stubs.num_tiles: num_tiles, stubs.valid: valid, stubs.load_ptr: load_ptr,
        stubs.store_ptr: store_ptr, stubs.atomic_add: atomic("add"), stubs.atomic_max: atomic("max"),
        stubs.atomic_min: atomic("min"), stubs.atomic_cas: atomic_cas, stubs.last_arrival: misplaced,
    })


register_memory_ops()
