"""Row workloads: `softmax`, `log_softmax`, `rms_norm`, `layer_norm` and `rope`,
bandwidth-bound, each beside PyTorch's eager ops and a copy of the same bytes."""
from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

from ..twins.rows import layer_norm_twin, rms_norm_twin, rope_twin, softmax_twin
from ..workload import (BANDWIDTH, DTYPES, TILESAFE, TOLERANCE, TORCH, TWIN, Impl, Setup, Workload, element_bytes,
                        empty, randn)
from . import baselines
from .qwen3 import HEAD_DIM, MODELS, VOCAB

_reduce = importlib.import_module("tilesafe.kernels.reduce")
_norms = importlib.import_module("tilesafe.kernels.norms")
_rope_kernels = importlib.import_module("tilesafe.kernels.rope")
EPS, THETA = 1e-6, 1e6
LN_EPS = 1e-5                   # LayerNorm's usual eps (PyTorch's default), RMSNorm's is Qwen3's
TOKENS = 16384


def softmax_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:   # one tile a row, and rows longer than one tile (statistics per chunk, then a pass)
        return [_softmax(10, 100, "f32", setup), _softmax(3, 3000, "f32", setup)]
    shapes = [(8192, 4096)] if setup.size == "quick" else [(32768, 1024), (8192, 4096), (2048, 16384)]
    # ... and sampling: f32 logits of 64 sequences over the vocabulary (the long-row path)
    return [_softmax(m, n, "bf16", setup) for m, n in shapes] + [_softmax(64, VOCAB, "f32", setup)]


def rms_norm_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_rms_norm(10, 100, "f32", setup)]
    models = ("8B",) if setup.size == "quick" else ("4B", "8B", "32B")
    return [_rms_norm(TOKENS, MODELS[m].hidden, "bf16", setup) for m in models]


def rope_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_rope(5, 6, 64, "f32", setup)]
    return [_rope(TOKENS, 32, HEAD_DIM, "bf16", setup)]


def log_softmax_workloads(setup: Setup) -> list[Workload]:
    # softmax's shapes and paths (one tile a row; the vocabulary's statistics then a pass)
    if setup.tiny:
        return [_softmax(10, 100, "f32", setup, log=True), _softmax(3, 3000, "f32", setup, log=True)]
    return [_softmax(8192, 4096, "bf16", setup, log=True), _softmax(64, VOCAB, "f32", setup, log=True)]


def layer_norm_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_layer_norm(10, 100, "f32", setup)]
    models = ("8B",) if setup.size == "quick" else ("4B", "8B", "32B")
    return [_layer_norm(TOKENS, MODELS[m].hidden, "bf16", setup) for m in models]


def _softmax(m: int, n: int, dtype: str, setup: Setup, log: bool = False) -> Workload:
    """softmax, or log_softmax (the same library kernels and twins with their LOG constant)."""
    dev = setup.device
    nbytes = 2 * m * n * element_bytes(dtype)
    family, op, lib = ("log_softmax", torch.log_softmax, tk.log_softmax) if log else \
        ("softmax", torch.softmax, tk.softmax)

    def make(seed):
        return {"x": randn((m, n), dtype, seed, dev, scale=4.0), "out": empty((m, n), dtype, dev)}

    def twin(seen):
        run = softmax_twin(seen)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"]))
    return Workload(
        family, f"{family} {dtype} {m}x{n}", {"rows": m, "n": n}, dtype, BANDWIDTH, nbytes, 0.0, make,
        lambda b: op(b["x"].float(), dim=-1),
        [Impl("tilesafe", TILESAFE, lambda b: lib(b["x"], out=b["out"]), capture="tilesafe"),
         Impl(f"torch.{family}", TORCH, lambda b: op(b["x"], dim=-1)),
         baselines.copy(nbytes, dev)],
        observe=(_reduce.softmax_kernel, _reduce.row_stats_kernel, _reduce.softmax_apply_kernel), twin=twin)


def _rms_norm(m: int, n: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    es = element_bytes(dtype)
    nbytes = (2 * m * n + n) * es

    def make(seed):
        return {"x": randn((m, n), dtype, seed, dev), "w": randn((n,), dtype, seed + 1000, dev),
                "out": empty((m, n), dtype, dev)}

    def reference(b):
        x = b["x"].float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * b["w"].float()

    def twin(seen):
        run = rms_norm_twin(seen)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"], b["w"], EPS))
    return Workload(
        "rms_norm", f"rms_norm {dtype} {m}x{n}", {"rows": m, "n": n}, dtype, BANDWIDTH, nbytes, 0.0, make, reference,
        [Impl("tilesafe", TILESAFE, lambda b: tk.rms_norm(b["x"], b["w"], EPS, out=b["out"]), capture="tilesafe"),
         Impl("F.rms_norm", TORCH, lambda b: F.rms_norm(b["x"], (n,), b["w"], EPS)),
         baselines.copy(nbytes, dev)],
        observe=(_norms.rms_norm_kernel,), twin=twin)


def _layer_norm(m: int, n: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    es = element_bytes(dtype)
    nbytes = (2 * m * n + 2 * n) * es                       # x read, y written, weight and bias read

    def make(seed):
        return {"x": randn((m, n), dtype, seed, dev), "w": randn((n,), dtype, seed + 1000, dev),
                "b": randn((n,), dtype, seed + 3000, dev), "out": empty((m, n), dtype, dev)}

    def twin(seen):
        run = layer_norm_twin(seen)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"], b["w"], b["b"], LN_EPS))
    return Workload(
        "layer_norm", f"layer_norm {dtype} {m}x{n}", {"rows": m, "n": n}, dtype, BANDWIDTH, nbytes, 0.0, make,
        lambda b: F.layer_norm(b["x"].float(), (n,), b["w"].float(), b["b"].float(), LN_EPS),
        [Impl("tilesafe", TILESAFE, lambda b: tk.layer_norm(b["x"], b["w"], b["b"], LN_EPS, out=b["out"]),
              capture="tilesafe"),
         Impl("F.layer_norm", TORCH, lambda b: F.layer_norm(b["x"], (n,), b["w"], b["b"], LN_EPS)),
         baselines.copy(nbytes, dev)],
        observe=(_norms.layer_norm_kernel,), twin=twin)


def _rope(tokens: int, heads: int, d: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    nbytes = 2 * tokens * heads * d * element_bytes(dtype) + 8 * tokens

    def make(seed):
        g = torch.Generator(device=dev).manual_seed(seed + 2000)
        pos = torch.randint(0, 32768, (tokens,), generator=g, device=dev)
        cos, sin = rope_tables(pos, d)
        return {"x": randn((tokens, heads, d), dtype, seed, dev), "pos": pos, "out": empty((tokens, heads, d), dtype, dev),
                "cos": cos.to(DTYPES[dtype]), "sin": sin.to(DTYPES[dtype])}

    def twin(seen):
        run = rope_twin(seen)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"], b["pos"], THETA))
    return Workload(
        "rope", f"rope {dtype} {tokens}x{heads}x{d}", {"tokens": tokens, "heads": heads, "head_dim": d}, dtype,
        BANDWIDTH, nbytes, 0.0, make, lambda b: rotate_half(b["x"].float(), *rope_tables(b["pos"], d)),
        [Impl("tilesafe", TILESAFE, lambda b: tk.rope(b["x"], b["pos"], THETA, out=b["out"]), capture="tilesafe"),
         Impl("torch eager", TORCH, lambda b: rotate_half(b["x"], b["cos"], b["sin"])),
         baselines.copy(nbytes, dev)],
        observe=(_rope_kernels.rope_kernel,), twin=twin,
        # fp32 angles of positions up to 32k are off by ~1e-3 rad from the fp64 oracle's
        tolerance=max(5e-3, TOLERANCE[dtype]))


def rope_tables(pos, d: int):
    """The (tokens, 1, d) cos and sin tables of rotate-half RoPE, fp32 (as HF's rotary embedding)."""
    inv = THETA ** -(torch.arange(0, d, 2, device=pos.device, dtype=torch.float64) / d)     # (d/2,)
    angle = pos.double()[:, None] * inv[None, :]                                              # (tokens, d/2)
    angle = torch.cat([angle, angle], dim=-1)[:, None, :]                                     # (tokens, 1, d)
    return angle.cos().float(), angle.sin().float()


def rotate_half(x, cos, sin):
    """x * cos + (x with its halves swapped, the new first half negated) * sin, in x's dtype
    (the PyTorch eager way)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin

