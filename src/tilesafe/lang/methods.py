"""Attributes and methods of the objects a kernel's names refer to.

Tensor parameters (`z.store`, `z.load`, `x.partition`, `z.tiles`, `z.tile_shape`,
`x.extent`), device-side partitions (`px.load`) and tiles (`t.astype`, `t.shape`, `t.T`).
"""
from __future__ import annotations

from . import calls, memory, stubs
from .builder import Builder, describe
from .ir import TileType, Value
from .objects import BoundMethod, RefView, TensorArg

TENSOR_METHODS = ("store", "load", "partition", "tiles", "subtiles", "members", "scatter")
TILE_METHODS = ("astype", "reshape", "permute", "sum", "max", "min", "to")


def attribute_of(b: Builder, node, obj, attr: str):
    if isinstance(obj, TensorArg):
        return _tensor_attr(b, node, obj, attr)
    if isinstance(obj, RefView):
        if attr == "tile_shape":
            return obj.tile
        if attr == "load":
            return BoundMethod(obj, attr)
    if isinstance(obj, Value) and isinstance(obj.type, TileType):
        if attr == "shape":
            return obj.shape
        if attr == "dtype":
            return obj.dtype
        if attr == "ndim":
            return len(obj.shape)
        if attr == "T":
            return calls.transpose(b, node, obj)
        if attr in TILE_METHODS:
            return BoundMethod(obj, attr)
    raise b.error(node, f"{describe(obj)} has no attribute `{attr}` in a kernel")


def _tensor_attr(b: Builder, node, x: TensorArg, attr: str):
    if attr in TENSOR_METHODS:
        return BoundMethod(x, attr)
    if attr == "tile_shape":
        if x.tile is None:
            raise b.error(node, f"`{x.name}` ({x.kind_name}) has no tile shape; only outputs do")
        return x.tile
    if attr in ("extent", "shape"):
        return tuple(memory.extent(b, x, a) for a in range(x.rank))
    if attr == "dtype":
        return x.dtype
    if attr == "ndim":
        return x.rank
    raise b.error(node, f"the tensor `{x.name}` has no attribute `{attr}` in a kernel",
                  help="tensors offer store, load, partition, tiles, subtiles, members, tile_shape, extent, dtype")


def call_method(b: Builder, node, bm: BoundMethod, args, kwargs):
    obj, name = bm.obj, bm.name
    try:
        if isinstance(obj, TensorArg):
            return _tensor_method(b, node, obj, name, args, kwargs)
        if isinstance(obj, RefView):
            return memory.view_load(b, node, obj, *args, **kwargs)
        return _tile_method(b, node, obj, name, args, kwargs)
    except TypeError as e:
        raise b.error(node, f"bad arguments to `.{name}()`: {e}") from None


def _tensor_method(b: Builder, node, x: TensorArg, name, args, kwargs):
    if name == "store":
        return memory.store(b, node, x, *args, **kwargs)
    if name == "load":
        return memory.load_own(b, node, x, *args, **kwargs)
    if name == "partition":
        return memory.partition_view(b, node, x, *args, **kwargs)
    raise b.error(node, f"`{x.name}.{name}()` is only valid as the iterable of a `for` loop",
                  help=f"for idx in {x.name}.{name}(...): ...")


def _tile_method(b: Builder, node, v: Value, name, args, kwargs):
    if name in ("astype", "to"):
        return calls.astype(b, node, v, *args, **kwargs)
    if name == "reshape":
        shape = args[0] if len(args) == 1 else tuple(args)
        return calls.reshape(b, node, v, shape)
    if name == "permute":
        dims = args[0] if len(args) == 1 else tuple(args)
        return calls.permute(b, node, v, dims)
    handler = calls.REGISTRY[getattr(stubs, name)]
    return handler(b, node, v, *args, **kwargs)

