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


def spec(shape, dtype=dtypes.f32, strides=None, tile=None) -> Spec:
    """Describe a tensor (or, with `tile`, a partition) for `kernel.ir/checks/compile/source`."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        strides = tuple(reversed(strides))
    tile = None if tile is None else ((tile,) if isinstance(tile, int) else tuple(tile))
    return Spec(shape, dtypes.coerce(dtype), tuple(strides), tile)
