"""Attention workloads: `flash` (prefill forward, bf16, head_dim 128, 32 heads, seq 1k..16k,
causal and not, against every SDPA backend) and `decode` (one query per head over a Qwen3
KV cache of 4k..32k positions, against SDPA and a copy of the KV bytes)."""
from __future__ import annotations

import importlib
import math

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

from ..twins.attention import decode_twin, flash_twin
from ..workload import BANDWIDTH, FLOPS, TILESAFE, TORCH, TWIN, Impl, Setup, Workload, element_bytes, empty, randn
from . import baselines
from .qwen3 import HEAD_DIM, MODELS

_kernels = importlib.import_module("tilesafe.kernels.attention")
HEADS = 32


def flash_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_flash(2, 2, 48, 64, causal, setup) for causal in (False, True)]
    seqs = (1024, 4096, 16384) if setup.size == "quick" else (1024, 2048, 4096, 8192, 16384)
    return [_flash(HEADS, HEADS, s, HEAD_DIM, causal, setup) for s in seqs for causal in (False, True)]


def decode_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [decode_workload("tiny", 8, 2, 128, 100, setup), decode_workload("tiny", 4, 4, 64, 64, setup)]
    contexts = (4096, 32768) if setup.size == "quick" else (4096, 8192, 16384, 32768)
    return [decode_workload(name, MODELS[name].heads, MODELS[name].kv_heads, ctx, ctx, setup)
            for name in ("4B", "32B") for ctx in contexts]


def sdpa_impls(device: str, default: bool = False, **kwargs) -> list[tuple]:
    """(name, fn) for `F.scaled_dot_product_attention` once per backend on CUDA (and torch's own
    choice too when `default`), or torch's own choice on the CPU."""
    def call(backend):
        def run(q, k, v):
            if backend is None:
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
            from torch.nn.attention import sdpa_kernel
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
        return run
    if not device.startswith("cuda"):
        return [("sdpa", call(None))]
    from torch.nn.attention import SDPBackend
    return [("sdpa", call(None))] * default + [
        (f"sdpa-{name}", call(getattr(SDPBackend, attr))) for name, attr in
        (("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"))]


def _flash(heads: int, kv_heads: int, s: int, d: int, causal: bool, setup: Setup) -> Workload:
    dt = "f32" if setup.tiny else "bf16"
    dev, scale = setup.device, 1.0 / math.sqrt(d)
    q_shape, kv_shape = (1, heads, s, d), (1, kv_heads, s, d)

    def make(seed):
        return {"q": randn(q_shape, dt, seed, dev), "k": randn(kv_shape, dt, seed + 1000, dev),
                "v": randn(kv_shape, dt, seed + 2000, dev), "out": empty(q_shape, dt, dev)}

    def twin(seen):
        run = flash_twin(seen, causal, scale)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["q"], b["k"], b["v"]))
    torch_impls = [Impl(name, TORCH, lambda b, f=f: f(b["q"], b["k"], b["v"]))
                   for name, f in sdpa_impls(dev, is_causal=causal, enable_gqa=heads != kv_heads)]
    mask = "causal" if causal else "full"
    return Workload(
        "flash", f"flash {dt} {mask} h={heads} s={s} d={d}", {"heads": heads, "kv_heads": kv_heads, "seq": s,
                                                              "head_dim": d, "causal": causal},
        dt, FLOPS, 4 * heads * s * d * element_bytes(dt), 4.0 * heads * s * s * d * (0.5 if causal else 1.0), make,
        lambda b: attention_reference(b["q"][0], b["k"][0], b["v"][0], causal, scale)[None],
        [Impl("tilesafe", TILESAFE, lambda b: tk.flash_attention(b["q"], b["k"], b["v"], causal=causal, out=b["out"]),
              capture="tilesafe"), *torch_impls],
        observe=(_kernels.flash_kernel, _kernels.flash_rows_kernel), twin=twin)


def decode_workload(model: str, heads: int, kv_heads: int, max_seq: int, length: int, setup: Setup,
                    d: int | None = None) -> Workload:
    """One decode-attention workload: `length` cached positions of `max_seq` per sequence."""
    dt = "f32" if setup.tiny else "bf16"
    dev, d = setup.device, d or (HEAD_DIM if not setup.tiny else 64)
    scale = 1.0 / math.sqrt(d)
    kv_bytes = 2 * kv_heads * length * d * element_bytes(dt)
    workspaces: dict = {}                    # scratch, made once at the first (eager) call

    def make(seed):
        return {"q": randn((heads, d), dt, seed, dev), "k": randn((kv_heads, max_seq, d), dt, seed + 1000, dev),
                "v": randn((kv_heads, max_seq, d), dt, seed + 2000, dev), "out": empty((heads, d), dt, dev),
                "lens": torch.full((1,), length, dtype=torch.int32, device=dev)}

    def tilesafe_call(b):
        if "tilesafe" not in workspaces:
            workspaces["tilesafe"] = tk.decode_workspace(b["q"], b["k"])
        return tk.decode_attention(b["q"], b["k"], b["v"], b["lens"], out=b["out"], workspace=workspaces["tilesafe"])

    def twin(seen):
        workspace, run = decode_twin(seen, scale)

        def call(b):
            if "twin" not in workspaces:
                workspaces["twin"] = workspace(b["q"])
            return run(b["out"], b["q"], b["k"], b["v"], b["lens"], workspaces["twin"])
        return Impl("twin", TWIN, call)

    def reference(b):
        k, v = b["k"][:, :length], b["v"][:, :length]
        return attention_reference(b["q"][:, None], k, v, False, scale)[:, 0]
    torch_impls = [Impl(name, TORCH, lambda b, f=f: f(b["q"][None, :, None], b["k"][None, :, :length],
                                                      b["v"][None, :, :length]).view(heads, d))
                   for name, f in sdpa_impls(dev, default=True, enable_gqa=heads != kv_heads)]
    return Workload(
        "decode", f"decode {dt} {model} h={heads}/{kv_heads} ctx={length}",
        {"model": model, "heads": heads, "kv_heads": kv_heads, "context": length, "max_seq": max_seq, "head_dim": d},
        dt, BANDWIDTH, kv_bytes + 2 * heads * d * element_bytes(dt), 4.0 * heads * length * d, make, reference,
        [Impl("tilesafe", TILESAFE, tilesafe_call, capture="tilesafe"), *torch_impls,
         baselines.copy(kv_bytes, dev)],
        observe=(_kernels.decode_partial_kernel, _kernels.decode_rows_kernel, _kernels.decode_last_kernel,
                 _kernels.decode_rows_last_kernel, _kernels.decode_combine_kernel),
        twin=twin)


def attention_reference(q, k, v, causal: bool, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale) v in fp32, one head at a time: q (H, S, D), k/v (HKV, S_k, D) -> (H, S, D)."""
    group = q.shape[0] // k.shape[0]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for h in range(q.shape[0]):
        s = (q[h].float() @ k[h // group].float().T) * scale                     # (S, S_k)
        if causal:
            s.masked_fill_(torch.ones_like(s, dtype=torch.bool).triu_(1), float("-inf"))
        out[h] = torch.softmax(s, dim=-1) @ v[h // group].float()
    return out
