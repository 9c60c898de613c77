"""`ts.spec(...)`: an abstract argument for inspecting kernels without memory."""
from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes
from ..dtypes import DType


@dataclass(frozen=True)
class Spec:
    shape: tuple[int, ...]
    dtype: DType
    strides: tuple[int, ...]
    tile: tuple[int, ...] | None = None   # with a tile, it stands for a partition


def dense_strides(shape) -> tuple:
    """The strides of a row-major dense tensor of `shape` (torch.empty's)."""
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def spec(shape, dtype=dtypes.f32, strides=None, tile=None) -> Spec:
    """Describe a tensor (or, with `tile`, a partition) for `kernel.ir/checks/compile/source`."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if strides is None:
        strides = dense_strides(shape)
    tile = None if tile is None else ((tile,) if isinstance(tile, int) else tuple(tile))
    return Spec(shape, dtypes.coerce(dtype), tuple(strides), tile)
