"""Element types shared by kernels, tensors and backends.

One `DType` object per element type; everything else (NumPy, PyTorch, Triton names)
is derived from it, so a new dtype is added in exactly one table.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    name: str          # tilesafe spelling, e.g. "bf16"
    bits: int
    kind: str          # "float", "int", "uint" or "bool"
    np_name: str       # NumPy / ml_dtypes spelling
    torch_name: str    # attribute of the torch module
    triton_name: str   # attribute of triton.language

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def np(self) -> np.dtype:
        return _np_dtype(self.np_name)

    @property
    def torch(self):
        import torch
        return getattr(torch, self.torch_name)

    def __repr__(self) -> str:
        return f"ts.{self.name}"


def _np_dtype(name: str) -> np.dtype:
    if hasattr(ml_dtypes, name) and name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


f32 = DType("f32", 32, "float", "float32", "float32", "float32")
f16 = DType("f16", 16, "float", "float16", "float16", "float16")
bf16 = DType("bf16", 16, "float", "bfloat16", "bfloat16", "bfloat16")
f8e4m3fn = DType("f8e4m3fn", 8, "float", "float8_e4m3fn", "float8_e4m3fn", "float8e4nv")
f8e5m2 = DType("f8e5m2", 8, "float", "float8_e5m2", "float8_e5m2", "float8e5")
f64 = DType("f64", 64, "float", "float64", "float64", "float64")
i8 = DType("i8", 8, "int", "int8", "int8", "int8")
i16 = DType("i16", 16, "int", "int16", "int16", "int16")
i32 = DType("i32", 32, "int", "int32", "int32", "int32")
i64 = DType("i64", 64, "int", "int64", "int64", "int64")
u8 = DType("u8", 8, "uint", "uint8", "uint8", "uint8")
bool_ = DType("bool_", 1, "bool", "bool", "bool", "int1")

ALL = (f32, f16, bf16, f8e4m3fn, f8e5m2, f64, i8, i16, i32, i64, u8, bool_)
BY_NAME = {d.name: d for d in ALL}
_BY_NP = {d.np: d for d in ALL}


def from_numpy(dt) -> DType:
    """The tilesafe dtype of a NumPy dtype; ValueError if there is none."""
    try:
        return _BY_NP[np.dtype(dt)]
    except (KeyError, TypeError):
        raise ValueError(f"tilesafe has no dtype for NumPy's {dt}") from None


def from_torch(dt) -> DType:
    found = BY_TORCH.get(dt)   # every tensor made asks: one dict lookup after the first time
    if found is not None:
        return found
    for d in ALL:
        if d.torch_name == str(dt).removeprefix("torch."):
            BY_TORCH[dt] = d
            return d
    raise ValueError(f"tilesafe has no dtype for torch's {dt}")


BY_TORCH: dict = {}     # torch.dtype -> DType, filled by from_torch (runtime/constructors.py reads it inline)


def coerce(dt) -> DType:
    """Accept a DType, a name ("bf16"), a NumPy or a torch dtype."""
    if isinstance(dt, DType):
        return dt
    if isinstance(dt, str) and dt in BY_NAME:
        return BY_NAME[dt]
    if type(dt).__module__ == "torch":
        return from_torch(dt)
    return from_numpy(dt)


def finite_range(dt: DType) -> tuple[float, float]:
    """Saturation bounds used by `astype` (fp8 and int conversions clip)."""
    if dt.is_float:
        info = ml_dtypes.finfo(dt.np) if dt.np_name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else np.finfo(dt.np)
        return float(info.min), float(info.max)
    if dt.is_bool:
        return 0.0, 1.0
    info = np.iinfo(dt.np)
    return float(info.min), float(info.max)
