"""`ts.prefetch(x, index, shape=...)`: a hint that this block will soon read a tile of a ts.Ref.

It has no meaning a program can observe: it yields no value, writes nothing, and the
reference interpreter skips it. On an NVIDIA GPU under programmatic dependent launch the
Triton backend issues it as `prefetch.global.L2` *before* the kernel's wait for the kernel
it depends on (codegen.py), so a block that starts while that kernel drains already pulls
its weights into L2. That is sound whatever the earlier kernel writes: the prefetch returns
nothing to the program, and L2 is where global writes meet, so a load after the wait sees
those writes. Its addresses are bounds-checked like a load's (S11: the tile's elements
outside x are not touched), and, as with ts.load's tile index, only a ts.Ref may be named.
Elsewhere (no PDL, CPU backends) it compiles to nothing.
"""
from __future__ import annotations

from .annotations import REF
from .builder import Builder, describe
from .calls import REGISTRY, static_shape
from .memory import index_values, tensor_arg
from .stubs import stub


@stub
def prefetch(x, index, shape, keep=False):
    """Hint that this block will read tile `index` (counted in tiles) of shape `shape` of the
    ts.Ref `x`: `ts.prefetch(w, (k, j), shape=(64, 32))`. No value, no effect on results;
    under PDL on an NVIDIA GPU the tile is pulled into L2 before the wait for the previous
    kernel (docs/language.md, "Prefetch"). `keep=True` asks L2 to evict the lines last, so
    that a kernel streaming other data meanwhile does not push them out first."""


def prefetch_handler(b: Builder, node, x, index, shape, keep=False):
    x = tensor_arg(b, node, x, "the first argument of ts.prefetch")
    if x.kind != REF:
        raise b.error(node, f"ts.prefetch names a read-only input (ts.Ref); `{x.name}` is {x.kind_name}",
                      help="prefetch the weights and other inputs the kernel only reads; an output is "
                           "accessed only as the block's own tile")
    shape = static_shape(b, node, shape)
    if len(shape) != x.rank:
        raise b.error(node, f"the tile shape {shape} has rank {len(shape)}, but `{x.name}` has rank {x.rank}",
                      help="give one tile size per axis of the tensor, as ts.load(x, index, shape=...) does")
    if not isinstance(keep, bool):
        raise b.error(node, f"keep= of ts.prefetch must be a compile-time bool, got {describe(keep)}",
                      help="keep=True (evict the lines last) or keep=False, or a ts.Const[bool] parameter")
    values = index_values(b, node, index, x.rank)
    for i in (index if isinstance(index, tuple) else (index,)):
        if isinstance(i, int) and i < 0:
            raise b.error(node, f"tile index {i} of ts.prefetch is before the start of `{x.name}`: "
                                "the tile is outside the tensor",
                          help="prefetch tiles the kernel reads: indices count tiles from 0")
    b.emit("prefetch", (x.value, *values), (), {"shape": shape, "mode": "tile", "keep": keep})
    return None


REGISTRY[prefetch] = prefetch_handler
