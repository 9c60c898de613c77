"""Where a tile access lands in Triton: its element origins, offsets and in-bounds masks.

Shared by the tile loads and stores (`emit_memory`) and the L2 prefetches (`emit_prefetch`),
which address the same tiles. Origins follow the interpreter's `origin()`:
    'block'   : block_id(a) * tile_a                     (the block's own tile)
    'subtile' : block_id(a) * tile_a + j_a * sub_a       (a minted sub-tile)
    'tile'    : index_a * shape_a                        (a tile-space index, may be anything)
With 64-bit offsets (`wide`) the origins are cast to int64 first.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...lang.bounds import GUARD
from ...lang.ir import Op
from .emitter import Emitter


@dataclass(frozen=True)
class TileGeometry:
    tensor: str
    shape: tuple[int, ...]
    origins: tuple[str, ...]   # element coordinates of the tile's first element, per axis
    may_be_negative: bool      # a 'tile' index is arbitrary: check the lower bound too
    indices: tuple = ()        # 'tile' mode: the index Value per axis (for bounds.GUARD)


def geometry(em: Emitter, op: Op) -> TileGeometry:
    """The tile `op` (a load, store, valid or prefetch) reads or writes."""
    t = op.args[0]
    mode = op.attrs.get("mode", "tile")
    if op.opcode == "store":
        index = op.args[2:]
        shape = op.attrs.get("sub") if mode == "subtile" else t.type.tile
    else:
        index = op.args[1:]
        shape = tuple(op.attrs["shape"])
    owner = op.attrs.get("owner")
    tile = em.fn.param(owner).value.type.tile if owner else t.type.tile
    origins = []
    for a in range(len(shape)):
        if mode == "block" or mode == "member" and a > 0:
            terms = [scaled(_pid(em, a), tile[a])]
        elif mode == "member":     # member index[0] of the block's group (S16)
            terms = [scaled(index_expr(em, index[0]), tile[0])]
        elif mode == "group":      # a MutLast tile: grid axes 1.. (S16)
            terms = [scaled(_pid(em, a + 1), tile[a]) if a + 1 < em.fn.grid_rank else "0"]
        elif mode == "subtile":
            terms = [scaled(_pid(em, a), tile[a]), scaled(index_expr(em, index[a]), op.attrs["sub"][a])]
        else:
            terms = [scaled(index_expr(em, index[a]), shape[a])]
        terms = [x for x in terms if x != "0"]
        origins.append(" + ".join(terms) or "0")
    tile_mode = mode == "tile"
    return TileGeometry(em.tensor_name(t), tuple(shape), tuple(origins), tile_mode,
                        tuple(index) if tile_mode else ())


def _pid(em: Emitter, axis: int) -> str:
    pid = em.pid(axis)
    return f"{pid}.to(tl.int64)" if em.wide else pid


def index_expr(em: Emitter, v) -> str:
    """A tile index as an expression, widened to int64 under 64-bit offsets."""
    if em.wide:
        return f"tl.cast({em.ref(v)}, tl.int64)"
    return em.ref(v)


def scaled(expr: str, k: int) -> str:
    """`expr * k`, with the products by 0 and 1 folded."""
    if expr == "0" or k == 0:
        return "0"
    return expr if k == 1 else f"{expr} * {k}"


def expand(name: str, axis: int, rank: int) -> str:
    """A 1-D `name` along `axis` of a rank-`rank` tile (`x[:, None]` and the like)."""
    if rank == 1:
        return name
    return f"{name}[{', '.join(':' if a == axis else 'None' for a in range(rank))}]"


def axis_mask(em: Emitter, tensor: str, axis: int, offs: str, lower: bool) -> str:
    """Offsets `offs` fall inside `tensor` along `axis` (and are >= 0 when `lower`)."""
    upper = f"({offs} < {em.tensors[tensor].extents[axis]})"
    return f"({offs} >= 0) & {upper}" if lower else upper


def tile_guard(em: Emitter, tensor: str, axis: int, index, shape: int) -> str:
    """bounds.GUARD: tile `index` of `shape` elements overlaps the axis, computed without the
    product index * shape (which may wrap): 0 <= index <= (extent - 1) // shape."""
    i, n = em.strong(index), em.tensors[tensor].extents[axis]
    return em.memo(f"({i} >= 0) & ({i} <= ({n} - 1) // {shape})", f"{tensor}_tile{axis}_ok")


def access_flags(em: Emitter, op: Op, rank: int) -> tuple:
    """The bounds plan's per-axis flags; an access it does not cover is masked and guarded."""
    return em.masks.get(id(op), (GUARD,) * rank)
