"""The bandwidth ceilings measured beside each kernel, on their own buffers of the same bytes:
a device-to-device copy (read + write) and a plain read (for weight-streaming GEMVs)."""
from __future__ import annotations

import math

import torch

from ..twins import read as read_twin
from ..workload import BASELINE, Impl, element_bytes, randn, rel_error


def copy(total_bytes: int, device: str) -> Impl:
    """`dst.copy_(src)` moving `total_bytes` in all (half read, half written)."""
    n = max(1, total_bytes // 2 // 4)                      # fp32 elements of src

    def make(seed: int) -> dict:
        return {"src": randn((n,), "f32", 10_000 + seed, device), "dst": torch.empty(n, device=device)}

    def call(b):
        return b["dst"].copy_(b["src"])
    return Impl("copy", BASELINE, call, make=make, check=lambda b, got: rel_error(got, b["src"]))


def read(shape, dtype: str, device: str) -> Impl:
    """A read of a buffer of `shape` and `dtype` (the weight of a GEMV), summed in chunks."""
    numel = math.prod(shape)

    def make(seed: int) -> dict:
        return {"x": randn(shape, dtype, 20_000 + seed, device),
                "sums": torch.empty(read_twin.partials(numel), device=device)}

    def call(b):
        return read_twin.read_all(b["sums"], b["x"].view(-1))

    def check(b, got):
        want = b["x"].float().sum()
        return float((got.sum() - want).abs() / b["x"].float().abs().sum().clamp_min(1e-30))
    return Impl("read", BASELINE, call, make=make, check=check, bytes=numel * element_bytes(dtype))
