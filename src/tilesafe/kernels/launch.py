"""Launching one library kernel: partition its outputs, launch, give the outputs back.

The partitions are always unpartitioned, also when the launch is refused, so a failed
call never leaves a caller's `out=` tensor lent. The launch is not waited for: later host
reads and launches are ordered after it by the runtime (S9/S10).
"""
from __future__ import annotations

from ..runtime.tensor import Tensor


def launch(kernel, outputs: dict[str, tuple[Tensor, tuple]], grid=None, **args) -> None:
    """`kernel(**{name: view.partition(tile)}, **args)`; `grid` only for persistent kernels."""
    parts = {}
    try:
        for name, (view, tile) in outputs.items():
            parts[name] = view.partition(tuple(tile))
        if grid is None:
            kernel(**parts, **args)
        else:
            kernel.launch(**parts, grid=grid, **args)
    finally:
        for p in parts.values():
            p.unpartition()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1
