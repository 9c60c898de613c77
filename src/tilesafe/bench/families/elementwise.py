"""Elementwise workloads: `add` (bf16 and fp32, 512 MiB per operand) and `silu_mul` (the
SwiGLU product at Qwen3 MLP widths), each beside torch and a copy of the same bytes."""
from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

from ..twins.elementwise import ADD, SILU_MUL, binary_twin
from ..workload import BANDWIDTH, TILESAFE, TORCH, TWIN, Impl, Setup, Workload, element_bytes, empty, randn
from . import baselines
from .qwen3 import MODELS

MiB = 1 << 20
_kernels = importlib.import_module("tilesafe.kernels.elementwise")


def add_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_add("f32", 5000, setup)]
    return [_add(dt, 512 * MiB // element_bytes(dt), setup) for dt in ("bf16", "f32")]


def silu_mul_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_silu_mul(6, 100, "f32", setup)]
    models = ("8B",) if setup.size == "quick" else ("4B", "8B", "32B")
    return [_silu_mul(4096, MODELS[m].intermediate, "bf16", setup) for m in models]


def _add(dtype: str, n: int, setup: Setup) -> Workload:
    dev = setup.device
    nbytes = 3 * n * element_bytes(dtype)

    def make(seed):
        return {"x": randn((n,), dtype, seed, dev), "y": randn((n,), dtype, seed + 1000, dev),
                "out": empty((n,), dtype, dev)}

    def twin(seen):
        run = binary_twin(seen, ADD)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"], b["y"]))
    size = f"{n * element_bytes(dtype) // MiB}MiB" if n * element_bytes(dtype) >= MiB else f"{n}"
    return Workload(
        "add", f"add {dtype} {size}", {"n": n, "operand_bytes": n * element_bytes(dtype)}, dtype, BANDWIDTH, nbytes, 0.0,
        make, lambda b: b["x"].float() + b["y"].float(),
        [Impl("tilesafe", TILESAFE, lambda b: tk.add(b["x"], b["y"], out=b["out"]), capture="tilesafe"),
         Impl("torch.add", TORCH, lambda b: torch.add(b["x"], b["y"], out=b["out"])),
         baselines.copy(nbytes, dev)],
        observe=(_kernels.binary_kernel,), twin=twin)


def _silu_mul(tokens: int, width: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    shape = (tokens, width)
    nbytes = 3 * tokens * width * element_bytes(dtype)

    def make(seed):
        return {"gate": randn(shape, dtype, seed, dev), "up": randn(shape, dtype, seed + 1000, dev),
                "out": empty(shape, dtype, dev)}

    def twin(seen):
        run = binary_twin(seen, SILU_MUL)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["gate"], b["up"]))
    return Workload(
        "silu_mul", f"silu_mul {dtype} {tokens}x{width}", {"tokens": tokens, "width": width}, dtype, BANDWIDTH,
        nbytes, 0.0, make, lambda b: F.silu(b["gate"].float()) * b["up"].float(),
        [Impl("tilesafe", TILESAFE, lambda b: tk.silu_mul(b["gate"], b["up"], out=b["out"]), capture="tilesafe"),
         Impl("torch eager", TORCH, lambda b: torch.mul(F.silu(b["gate"]), b["up"], out=b["out"])),
         baselines.copy(nbytes, dev)],
        observe=(_kernels.binary_kernel,), twin=twin)
