"""Matrix-multiply workloads: `gemm` (square bf16 products 1024..16384 and the Qwen3 layer
projections at M = 16, 128, 2048 rows, against cuBLAS), `gemv` (M = 1: every Qwen3-4B
and -32B projection and the lm_head, against F.linear and a plain read of the weight) and
`bmm` (batched: Z = 64 attention-like 1024x1024x128 products in bf16 and fp16, Z = 8 of
2048^3 in bf16, and Z = 256 of 1024x1024x128 in the full set, against torch.bmm)."""
from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

from ..twins.matmul import bmm_twin, gemm_twin
from ..workload import BANDWIDTH, FLOPS, TILESAFE, TORCH, TWIN, Impl, Setup, Workload, element_bytes, empty, randn
from . import baselines
from .qwen3 import MODELS

_kernels = importlib.import_module("tilesafe.kernels.matmul")
GEMM_KERNELS = (_kernels.mm_kernel, _kernels.mm_persistent_kernel, _kernels.skinny_kernel, _kernels.split_k_kernel,
                _kernels.split_sum_kernel)
SQUARE = (1024, 2048, 4096, 8192, 16384)


def gemm_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:   # CPU tiles are 32: a tiled GEMM, a persistent one, ragged, and the M <= 16 path
        return [_square(64, setup), _linear("tiny", "ragged", 96, 80, 70, setup),
                _linear("tiny", "m16", 16, 100, 96, setup)]
    out = [_square(n, setup) for n in SQUARE]
    models = ("4B", "8B", "32B")                 # every Qwen3 size the targets name, quick or not
    for m in (16, 128, 2048):
        for name in models:
            for proj, (n, k) in MODELS[name].projections().items():
                out.append(_linear(name, proj, m, n, k, setup))
    return out


def gemv_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_gemv("tiny", "ragged", 100, 90, setup), _gemv("tiny", "even", 64, 128, setup)]
    models = ("4B", "8B", "32B")                 # every Qwen3 size the targets name, quick or not
    return [_gemv(name, proj, n, k, setup) for name in models for proj, (n, k) in MODELS[name].projections().items()]


def bmm_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:   # ragged in M, N and K for CPU tiles of 32
        return [_bmm(3, 40, 36, 48, "f32", setup)]
    # (Z, M, N, K): Q @ K.T-like products (a head's 1024 queries by 1024 keys over d = 128),
    # and a batch of large square ones; fp16 once, so its tensor-core path is measured too
    out = [_bmm(64, 1024, 1024, 128, "bf16", setup), _bmm(8, 2048, 2048, 2048, "bf16", setup),
           _bmm(64, 1024, 1024, 128, "f16", setup)]
    if setup.size != "quick":
        out.append(_bmm(256, 1024, 1024, 128, "bf16", setup))
    return out


def _dtype(setup: Setup) -> str:
    return "f32" if setup.tiny else "bf16"


def _twin(setup: Setup, weight: str):
    """The twin of whichever GEMM kernel tilesafe launched; `weight` is "b" (K, N) or "w" (N, K)."""
    def build(seen):
        run = gemm_twin(seen, setup.sms)
        if weight == "b":
            return Impl("twin", TWIN, lambda b: run(b["out"], b["a"], b["b"]))
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"], b["w"].T))
    return build


def _square(n: int, setup: Setup) -> Workload:
    dt, dev = _dtype(setup), setup.device

    def make(seed):
        return {"a": randn((n, n), dt, seed, dev), "b": randn((n, n), dt, seed + 1000, dev),
                "out": empty((n, n), dt, dev)}
    return Workload(
        "gemm", f"gemm {dt} {n}x{n}x{n}", {"m": n, "n": n, "k": n}, dt, FLOPS, 3 * n * n * element_bytes(dt),
        2.0 * n ** 3, make, lambda b: b["a"].float() @ b["b"].float(),
        [Impl("tilesafe", TILESAFE, lambda b: tk.matmul(b["a"], b["b"], out=b["out"]), capture="tilesafe"),
         Impl("torch.matmul", TORCH, lambda b: torch.matmul(b["a"], b["b"], out=b["out"]))],
        observe=GEMM_KERNELS, twin=_twin(setup, "b"))


def linear_buffers(m: int, n: int, k: int, dt: str, dev: str):
    """The buffers of x (M, K) @ w (N, K).T: a maker of seeded inputs."""
    def make(seed):
        return {"x": randn((m, k), dt, seed, dev), "w": randn((n, k), dt, seed + 1000, dev, scale=k ** -0.5),
                "out": empty((m, n), dt, dev)}
    return make


def _linear(model: str, proj: str, m: int, n: int, k: int, setup: Setup) -> Workload:
    dt = _dtype(setup)
    es = element_bytes(dt)
    return Workload(
        "gemm", f"gemm {dt} {model} {proj} M={m} ({n}x{k})", {"model": model, "proj": proj, "m": m, "n": n, "k": k},
        dt, FLOPS, (m * k + n * k + m * n) * es, 2.0 * m * n * k, linear_buffers(m, n, k, dt, setup.device),
        lambda b: b["x"].float() @ b["w"].float().T,
        [Impl("tilesafe", TILESAFE, lambda b: tk.linear(b["x"], b["w"], out=b["out"]), capture="tilesafe"),
         Impl("F.linear", TORCH, lambda b: F.linear(b["x"], b["w"]))],
        observe=GEMM_KERNELS, twin=_twin(setup, "w"))


def _bmm(z: int, m: int, n: int, k: int, dt: str, setup: Setup) -> Workload:
    dev = setup.device

    def make(seed):
        return {"a": randn((z, m, k), dt, seed, dev), "b": randn((z, k, n), dt, seed + 1000, dev),
                "out": empty((z, m, n), dt, dev)}

    def twin(seen):
        run = bmm_twin(seen, setup.sms)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["a"], b["b"]))
    return Workload(
        "bmm", f"bmm {dt} Z={z} {m}x{n}x{k}", {"z": z, "m": m, "n": n, "k": k}, dt, FLOPS,
        z * (m * k + k * n + m * n) * element_bytes(dt), 2.0 * z * m * n * k, make,
        lambda b: b["a"].float() @ b["b"].float(),
        [Impl("tilesafe", TILESAFE, lambda b: tk.bmm(b["a"], b["b"], out=b["out"]), capture="tilesafe"),
         Impl("torch.bmm", TORCH, lambda b: torch.bmm(b["a"], b["b"], out=b["out"]))],
        observe=(_kernels.bmm_kernel, _kernels.bmm_persistent_kernel), twin=twin)


def _gemv(model: str, proj: str, n: int, k: int, setup: Setup) -> Workload:
    dt = _dtype(setup)
    es = element_bytes(dt)
    return Workload(
        "gemv", f"gemv {dt} {model} {proj} ({n}x{k})", {"model": model, "proj": proj, "m": 1, "n": n, "k": k}, dt,
        BANDWIDTH, (k + n * k + n) * es, 2.0 * n * k, linear_buffers(1, n, k, dt, setup.device),
        lambda b: b["x"].float() @ b["w"].float().T,
        [Impl("tilesafe", TILESAFE, lambda b: tk.linear(b["x"], b["w"], out=b["out"]), capture="tilesafe"),
         Impl("F.linear", TORCH, lambda b: F.linear(b["x"], b["w"])),
         baselines.read((n, k), dt, setup.device)],
        observe=GEMM_KERNELS, twin=_twin(setup, "w"))
