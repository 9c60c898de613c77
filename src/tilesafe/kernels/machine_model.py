"""What the config model knows of a GPU, and the shapes it sizes configs for.

`Gpu` holds the few numbers the model of waves, occupancy and bytes needs. The SM count,
the L2 and the shared memory come from the device (torch.cuda device properties) or, when
compiling ahead for a GPU that is not here, from its compile target; the HBM bandwidth and
the tensor-core rate are not in the device properties, so they are the H200's (4.8 TB/s,
~790 TFLOP/s of dense bf16 reached by cuBLAS), the rate scaled by the SM count.

The GPU and the shapes are named tuples, not dataclasses: a library call builds its shape
and the lookup hashes it on every call that has no plan yet (~0.3 us against ~5 us).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

H200_SMS = 132
H200_FLOPS = 790e12                  # dense bf16 / f16 products per second, what cuBLAS reaches
H200_BYTES_PER_S = 4.8e12            # HBM3e


class Gpu(NamedTuple):
    sms: int = H200_SMS
    l2_bytes: int = 60 * 1024 * 1024
    smem_per_sm: int = 228 * 1024            # shared memory of one SM (all its blocks together)
    smem_per_block: int = 227 * 1024         # what one block may ask for (the opt-in maximum)
    regs_per_sm: int = 65536
    hbm_bytes_per_s: float = H200_BYTES_PER_S
    flops: float = H200_FLOPS
    l2_bytes_per_s: float = 13e12            # what the SMs read from L2 together (fitted: gemm_model)
    launch_us: float = 2.5                   # one kernel's start and drain, as seen in a graph

    @property
    def flops_per_sm(self) -> float:
        return self.flops / self.sms


H200 = Gpu()


def gpu_of(target) -> Gpu:
    """The Gpu of compile target `target` (compiling ahead), else of the current CUDA device,
    else the H200's (the model's tested case)."""
    if target is not None:
        return _target_gpu(target)
    if not _has_cuda():
        return H200
    import torch
    return _device_gpu(torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _has_cuda() -> bool:
    """Asked on every modelled lookup: the driver query runs once."""
    import torch
    return torch.cuda.is_available()


@functools.lru_cache(maxsize=None)
def _target_gpu(target) -> Gpu:
    return _scaled(target.units, H200.l2_bytes, target.shared_bytes + 1024, target.shared_bytes)


@functools.lru_cache(maxsize=None)
def _device_gpu(index: int) -> Gpu:
    import torch
    p = torch.cuda.get_device_properties(index)
    smem_sm = int(getattr(p, "shared_memory_per_multiprocessor", 0) or H200.smem_per_sm)
    smem_block = int(getattr(p, "shared_memory_per_block_optin", 0) or H200.smem_per_block)
    return _scaled(int(p.multi_processor_count), int(getattr(p, "L2_cache_size", 0) or H200.l2_bytes),
                   smem_sm, smem_block)


def _scaled(sms: int, l2: int, smem_sm: int, smem_block: int) -> Gpu:
    return Gpu(sms=sms, l2_bytes=l2, smem_per_sm=smem_sm, smem_per_block=smem_block,
               flops=H200_FLOPS * sms / H200_SMS)


ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


class Gemm(NamedTuple):
    """c (m, n) = a (m, k) @ b (k, n): `matmul` for m > 16 rows, the `linear` path (weight
    streaming, a GEMV at m = 1) for m <= 16."""
    m: int
    n: int
    k: int
    dtype: str = "bf16"

    @property
    def family(self) -> str:
        return "linear" if self.m <= 16 else "matmul"

    def class_sizes(self) -> tuple[int, ...]:
        """The sizes the family's bucketed shape class is made of (configs.shape_class)."""
        return (self.n, self.k) if self.family == "linear" else (self.m, self.n, self.k)


class Attention(NamedTuple):
    """Prefill: q (batch, heads, sq, d), k and v (batch, kv_heads, sk, d)."""
    batch: int
    heads: int
    kv_heads: int
    sq: int
    sk: int
    d: int
    causal: bool = False
    dtype: str = "bf16"
    family = "attention"

    def class_sizes(self) -> tuple[int, ...]:
        return (self.d, self.sq)


class Decode(NamedTuple):
    """One query per head: q (heads, d) over caches (kv_heads, max_seq, d)."""
    heads: int
    kv_heads: int
    max_seq: int
    d: int
    dtype: str = "bf16"
    family = "decode"

    def class_sizes(self) -> tuple[int, ...]:
        return (self.d, self.heads // max(1, self.kv_heads))


def element_bytes(dtype: str) -> int:
    return ELEMENT_BYTES.get(dtype, 2)
