"""The random-shape draws (`random_shapes.draw`) as benchmark workloads: the library call
against cuBLAS (F.linear), every SDPA backend, and the bandwidth baselines, checked against
the fp32 oracle before timing as every workload is (runner.py). No raw-Triton twin: this
family measures the configs, not the cost of safety, and a twin would double its GPU time."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

from ...kernels import config_model as cm
from ...kernels.attention_model import flash_flops
from ..workload import BANDWIDTH, FLOPS, TILESAFE, TORCH, Impl, Setup, Workload, element_bytes, empty, randn
from . import baselines
from .attention import attention_reference, decode_workload, sdpa_impls
from .gemm import linear_buffers
from .random_shapes import draw

FAMILIES = ("gemm", "gemv", "flash", "decode")


def counts(n: int) -> dict[str, int]:
    """Draws per family for `--random-shapes N`: N GEMMs, and a third as many GEMVs and flash
    shapes, a quarter as many decode steps (each at least 2)."""
    return {"gemm": n, "gemv": max(2, math.ceil(n / 3)), "flash": max(2, math.ceil(n / 3)),
            "decode": max(2, math.ceil(n / 4))}


def random_workloads(setup: Setup, n: int, seed: int, families=FAMILIES) -> list[Workload]:
    """The workloads of `n` random GEMM shapes (and the other families' share) for `seed`."""
    want = {f: c for f, c in counts(n).items() if f in families}
    shapes = draw(seed, **{f: want.get(f, 0) for f in FAMILIES}, tiny=setup.tiny)
    build = {"gemm": _gemm, "gemv": _gemv, "flash": _flash, "decode": _decode_draw}
    return [build[f](shape, i, seed, setup) for f in FAMILIES for i, shape in enumerate(shapes[f])]


def _params(shape, i: int, seed: int) -> dict:
    fields = shape._asdict()
    return dict(fields, seed=seed, draw=i, shape_kind=type(shape).__name__)


def _gemm(s: cm.Gemm, i: int, seed: int, setup: Setup) -> Workload:
    es = element_bytes(s.dtype)
    return Workload(
        "random-gemm", f"gemm {s.dtype} M={s.m} ({s.n}x{s.k}) #{i}", _params(s, i, seed), s.dtype, FLOPS,
        (s.m * s.k + s.n * s.k + s.m * s.n) * es, 2.0 * s.m * s.n * s.k,
        linear_buffers(s.m, s.n, s.k, s.dtype, setup.device), lambda b: b["x"].float() @ b["w"].float().T,
        [Impl("tilesafe", TILESAFE, lambda b: tk.linear(b["x"], b["w"], out=b["out"]), capture="tilesafe"),
         Impl("F.linear", TORCH, lambda b: F.linear(b["x"], b["w"]))])


def _gemv(s: cm.Gemm, i: int, seed: int, setup: Setup) -> Workload:
    es = element_bytes(s.dtype)
    return Workload(
        "random-gemv", f"gemv {s.dtype} ({s.n}x{s.k}) #{i}", _params(s, i, seed), s.dtype, BANDWIDTH,
        (s.k + s.n * s.k + s.n) * es, 2.0 * s.n * s.k, linear_buffers(1, s.n, s.k, s.dtype, setup.device),
        lambda b: b["x"].float() @ b["w"].float().T,
        [Impl("tilesafe", TILESAFE, lambda b: tk.linear(b["x"], b["w"], out=b["out"]), capture="tilesafe"),
         Impl("F.linear", TORCH, lambda b: F.linear(b["x"], b["w"])), baselines.read((s.n, s.k), s.dtype,
                                                                                    setup.device)])


def _flash(s: cm.Attention, i: int, seed: int, setup: Setup) -> Workload:
    dev, scale = setup.device, 1.0 / math.sqrt(s.d)
    q_shape, kv_shape = (s.batch, s.heads, s.sq, s.d), (s.batch, s.kv_heads, s.sk, s.d)

    def make(sd):
        return {"q": randn(q_shape, s.dtype, sd, dev), "k": randn(kv_shape, s.dtype, sd + 1000, dev),
                "v": randn(kv_shape, s.dtype, sd + 2000, dev), "out": empty(q_shape, s.dtype, dev)}

    def reference(b):
        return torch.stack([attention_reference(b["q"][z], b["k"][z], b["v"][z], s.causal, scale)
                            for z in range(s.batch)])
    torch_impls = [Impl(name, TORCH, lambda b, f=f: f(b["q"], b["k"], b["v"]))
                   for name, f in sdpa_impls(dev, is_causal=s.causal, enable_gqa=s.heads != s.kv_heads)]
    mask = "causal" if s.causal else "full"
    es = element_bytes(s.dtype)
    return Workload(
        "random-flash", f"flash {s.dtype} {mask} b={s.batch} h={s.heads}/{s.kv_heads} s={s.sq} d={s.d} #{i}",
        _params(s, i, seed), s.dtype, FLOPS, 2 * s.batch * (s.heads * s.sq + s.kv_heads * s.sk) * s.d * es,
        flash_flops(s), make, reference,
        [Impl("tilesafe", TILESAFE, lambda b: tk.flash_attention(b["q"], b["k"], b["v"], causal=s.causal,
                                                                 out=b["out"]), capture="tilesafe"), *torch_impls])


def _decode_draw(s: cm.Decode, i: int, seed: int, setup: Setup) -> Workload:
    w = decode_workload("random", s.heads, s.kv_heads, s.max_seq, s.max_seq, setup, d=s.d)
    w.family, w.name = "random-decode", f"decode {w.dtype} h={s.heads}/{s.kv_heads} ctx={s.max_seq} d={s.d} #{i}"
    w.params = _params(s, i, seed)
    w.twin, w.observe = None, ()
    return w
