"""Moving element data between NumPy (with ml_dtypes) and torch, and casting it on the host.

torch cannot hand bf16 or fp8 tensors to NumPy, and NumPy knows those types only through
ml_dtypes; both sides agree on the bits, so such data crosses as a same-size integer view.
Host casts to fp8 saturate, as the GPU's `cvt.rn.satfinite` does.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import dtypes
from ..dtypes import DType

# Same-size integer types that carry ml_dtypes' bits across (ml_dtypes types are all 8 or 16 bits).
_CARRIER = {1: (np.uint8, torch.uint8), 2: (np.int16, torch.int16)}


def _is_ml_dtype(dt: DType) -> bool:
    # Not `kind == "V"`: ml_dtypes gives float8_e5m2 kind "f" but bfloat16 kind "V".
    return dt.np.type.__module__.startswith("ml_dtypes")


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A fresh C-contiguous host copy of `t` as a NumPy array (ml_dtypes for bf16/fp8)."""
    dt = dtypes.from_torch(t.dtype)
    host = torch.empty(t.shape, dtype=t.dtype)     # one copy, whatever device `t` is on
    host.copy_(t.detach())
    if _is_ml_dtype(dt):
        return host.view(_CARRIER[dt.itemsize][1]).numpy().view(dt.np)
    return host.numpy()


def to_torch(value) -> torch.Tensor:
    """A CPU torch tensor holding `value` (NumPy array, ml_dtypes array, list or scalar).

    The result may share memory with a NumPy input; callers copy it where they keep it.
    Raises ValueError when NumPy's dtype has no tilesafe equivalent.
    """
    if isinstance(value, torch.Tensor):
        return value.detach()
    arr = np.asarray(value)
    dt = dtypes.from_numpy(arr.dtype)              # ValueError for e.g. complex or uint16
    arr = np.require(arr, requirements=("C", "W"))  # torch wants contiguous, writable memory
    if _is_ml_dtype(dt):
        np_carrier, torch_carrier = _CARRIER[dt.itemsize]
        return torch.from_numpy(arr.view(np_carrier)).view(torch_carrier).view(dt.torch)
    return torch.from_numpy(arr)


def saturated_for(source: torch.Tensor, target: torch.dtype) -> torch.Tensor:
    """`source`, clipped to an fp8 target's finite range, ready for `target.copy_(...)`.

    torch's own float-to-fp8 cast saturates on the CPU but gives NaN on CUDA; clipping
    first makes host writes agree everywhere (NaN stays NaN).
    """
    dt = dtypes.from_torch(target)
    if dt not in (dtypes.f8e4m3fn, dtypes.f8e5m2) or source.dtype == target:
        return source
    lo, hi = dtypes.finite_range(dt)
    return source.to(torch.float32).clamp(lo, hi)
