"""Constant memory: compile-time tables, a third address space beside global and shared.

`SINES = simt.table(np.sin(np.arange(64) / 10).astype(np.float32))` at module level makes a
read-only table a kernel may index (`SINES[i]`, `SINES.get(i, 0.0)`). On the GPU it lives in
constant memory (`cuda.const.array_like`), on the CPU it is the array itself. It is its own
type: it has no permits, takes no atomics, is never written and cannot stand where a global
tensor or a shared array is expected.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import KernelError, caller_loc
from .params import SUPPORTED_DTYPES

CONSTANT_LIMIT = 64 * 1024     # bytes of constant memory a kernel may use (CUDA)


class Table:
    """A compile-time table in constant memory (make one with `simt.table(values)`)."""
    __slots__ = ("array", "dtype")
    kind = "constant"

    def __init__(self, array: np.ndarray, dtype):
        self.array, self.dtype = array, dtype

    @property
    def shape(self) -> tuple:
        return self.array.shape

    @property
    def name(self) -> str:
        return "constant table"

    def __repr__(self) -> str:
        return f"simt.table(shape={self.array.shape}, dtype={self.dtype.name})"


def table(values) -> Table:
    """A read-only table for kernels to index, placed in constant memory on the GPU (at most 64 KiB)."""
    array = np.array(values)             # a private copy: later changes to `values` do not reach it
    try:
        dtype = dtypes.from_numpy(array.dtype)
    except Exception:
        dtype = None
    if dtype not in SUPPORTED_DTYPES or not 1 <= array.ndim <= 3 or array.size == 0:
        raise KernelError(f"simt.table takes a non-empty array of rank 1 to 3 with a SIMT dtype, got {array.dtype} "
                          f"of shape {array.shape}", caller_loc(),
                          help="pass e.g. np.array([...], dtype=np.float32)")
    if array.nbytes > CONSTANT_LIMIT:
        raise KernelError(f"simt.table of {array.nbytes} bytes is larger than constant memory ({CONSTANT_LIMIT} "
                          "bytes)", caller_loc(), help="pass large read-only data as a simt.Ref argument")
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return Table(array, dtype)
