"""One batch-1 decode step of a Qwen3-shaped model, written three times: with `tilesafe.kernels`
calls into preallocated `out=` buffers (as an engine writes it: TilesafeStep, one call per
operation), with the library's fused calls a user would reach for into the same kind of
buffers (FusedStep: norm + projection, norm + RoPE, the residual added by the projections,
argmax fused into the LM head), and in eager PyTorch (as a Hugging Face style model runs it).
Random weights; the same token at the same position every step, so every step does the same
work. Used by host_overhead.py."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

EPS = 1e-6
THETA = 1e6


@dataclass(frozen=True, slots=True)
class Dims:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    vocab: int
    context: int        # tokens already in the KV cache; the step writes position `context`
    max_seq: int


QWEN3_4B = Dims(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128, inter=9728, vocab=151936, context=512,
                max_seq=1024)
SMOKE = Dims(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, inter=96, vocab=300, context=8, max_seq=16)


def weights(d: Dims, device, dtype, seed=0) -> dict:
    g = torch.Generator(device).manual_seed(seed)

    def rnd(*shape, scale):
        return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * scale).to(dtype)

    def norm(n):
        return 1.0 + rnd(n, scale=0.05)
    qw, kvw = d.heads * d.head_dim, d.kv_heads * d.head_dim
    layers = [dict(ln1=norm(d.hidden), qkv=rnd(qw + 2 * kvw, d.hidden, scale=d.hidden ** -0.5),
                   q_norm=norm(d.head_dim), k_norm=norm(d.head_dim), o=rnd(d.hidden, qw, scale=qw ** -0.5),
                   ln2=norm(d.hidden), gate_up=rnd(2 * d.inter, d.hidden, scale=d.hidden ** -0.5),
                   down=rnd(d.hidden, d.inter, scale=d.inter ** -0.5)) for _ in range(d.layers)]
    return dict(embed=rnd(d.vocab, d.hidden, scale=1.0), final=norm(d.hidden), layers=layers)


def caches(d: Dims, device, dtype, seed=1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (k, v), each (KV, max_seq, D), filled up to `context`."""
    g = torch.Generator(device).manual_seed(seed)
    shape = (d.kv_heads, d.max_seq, d.head_dim)
    return [tuple(torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype) for _ in range(2))
            for _ in range(d.layers)]


class _Step:
    """What both tilesafe steps hold: the sizes, weights and caches, the step's device inputs
    (token, position, sequence length) and a maker of buffers allocated once."""

    def _inputs(self, d: Dims, w: dict, kv: list, device, dtype):
        """Sets the inputs; returns the buffer maker and the q and k/v widths."""
        self.d, self.w, self.kv = d, w, kv
        self.token = torch.tensor([7], device=device, dtype=torch.int32)
        self.pos = torch.tensor([d.context], device=device, dtype=torch.int32)
        self.seq_len = torch.tensor([d.context + 1], device=device, dtype=torch.int32)
        e = lambda *shape, dt=dtype: torch.empty(shape, device=device, dtype=dt)   # noqa: E731
        return e, d.heads * d.head_dim, d.kv_heads * d.head_dim


class TilesafeStep(_Step):
    """The step as tilesafe.kernels calls into buffers allocated once (13 calls a layer)."""

    def __init__(self, d: Dims, w: dict, kv: list, device, dtype):
        e, qw, kvw = self._inputs(d, w, kv, device, dtype)
        self.r, self.y, self.delta = e(1, d.hidden), e(1, d.hidden), e(1, d.hidden)
        self.qkv, self.qn, self.kn = e(1, qw + 2 * kvw), e(d.heads, d.head_dim), e(d.kv_heads, d.head_dim)
        self.qr, self.kr = e(1, d.heads, d.head_dim), e(1, d.kv_heads, d.head_dim)
        self.attn, self.o = e(d.heads, d.head_dim), e(1, d.hidden)
        self.gu, self.act = e(1, 2 * d.inter), e(1, d.inter)
        self.logits, self.next = e(1, d.vocab), e(1, dt=torch.int32)
        self.attn_ws = tk.decode_workspace(self.qn, kv[0][0])
        self.argmax_ws = tk.argmax_workspace(self.logits)

    def __call__(self) -> torch.Tensor:
        d, w = self.d, self.w
        qw, kvw, p = d.heads * d.head_dim, d.kv_heads * d.head_dim, d.context
        tk.embedding(self.token, w["embed"], out=self.r)                                  # (1, hidden)
        for i, (L, (kc, vc)) in enumerate(zip(w["layers"], self.kv)):
            if i == 0:
                tk.rms_norm(self.r, L["ln1"], EPS, out=self.y)
            else:           # r += delta; y = norm(r)
                tk.rms_norm(self.delta, L["ln1"], EPS, residual=self.r, out=self.y, residual_out=self.r)
            tk.linear(self.y, L["qkv"], out=self.qkv)                                     # (1, q + 2 kv)
            q = self.qkv[0, :qw].view(d.heads, d.head_dim)                                # (H, D)
            k = self.qkv[0, qw:qw + kvw].view(d.kv_heads, d.head_dim)                     # (KV, D)
            v = self.qkv[0, qw + kvw:].view(d.kv_heads, d.head_dim)                       # (KV, D)
            tk.rms_norm(q, L["q_norm"], EPS, out=self.qn)
            tk.rms_norm(k, L["k_norm"], EPS, out=self.kn)
            tk.rope(self.qn.view(1, d.heads, d.head_dim), self.pos, THETA, out=self.qr)  # (1, H, D)
            tk.rope(self.kn.view(1, d.kv_heads, d.head_dim), self.pos, THETA, out=self.kr)
            kc[:, p].copy_(self.kr[0])                                                    # the cache append: torch
            vc[:, p].copy_(v)
            tk.decode_attention(self.qr[0], kc, vc, self.seq_len, out=self.attn, workspace=self.attn_ws)
            tk.linear(self.attn.view(1, qw), L["o"], out=self.o)                          # (1, hidden)
            tk.rms_norm(self.o, L["ln2"], EPS, residual=self.r, out=self.y, residual_out=self.r)
            tk.linear(self.y, L["gate_up"], out=self.gu)                                  # (1, 2 I)
            tk.silu_mul(self.gu[:, :d.inter], self.gu[:, d.inter:], out=self.act)         # (1, I)
            tk.linear(self.act, L["down"], out=self.delta)                                # (1, hidden)
        tk.rms_norm(self.delta, w["final"], EPS, residual=self.r, out=self.y, residual_out=self.r)
        tk.linear(self.y, w["embed"], out=self.logits)                                    # tied head: (1, vocab)
        tk.argmax(self.logits, out=self.next, workspace=self.argmax_ws)
        return self.logits


class FusedStep(_Step):
    """The step with the library's fused calls (7 calls a layer and 2 torch cache copies):
    rms_norm_linear (norm + QKV, norm + gate/up), norm_rope (q, k), linear with `residual=`
    (o-projection added to the residual stream in place), silu_mul_linear with `residual=`
    (down projection, likewise) and linear_argmax with the final norm (the next token; the
    logits are never written). `logits()` computes them from the step's final residual
    stream, for checking against TorchStep (not part of the timed step)."""

    def __init__(self, d: Dims, w: dict, kv: list, device, dtype):
        e, qw, kvw = self._inputs(d, w, kv, device, dtype)
        self.r, self.qkv = e(1, d.hidden), e(1, qw + 2 * kvw)
        self.qr, self.kr = e(1, d.heads, d.head_dim), e(1, d.kv_heads, d.head_dim)
        self.attn, self.gu = e(d.heads, d.head_dim), e(1, 2 * d.inter)
        self.next, self.logprob = e(1, dt=torch.int32), e(1, dt=torch.float32)
        self.attn_ws = tk.decode_workspace(self.qr[0], kv[0][0])

    def __call__(self) -> torch.Tensor:
        d, w, r = self.d, self.w, self.r
        qw, kvw, p = d.heads * d.head_dim, d.kv_heads * d.head_dim, d.context
        tk.embedding(self.token, w["embed"], out=r)                                       # (1, hidden)
        for L, (kc, vc) in zip(w["layers"], self.kv):
            tk.rms_norm_linear(r, L["ln1"], L["qkv"], EPS, out=self.qkv)                  # (1, q + 2 kv)
            q = self.qkv[:, :qw].view(1, d.heads, d.head_dim)                             # (1, H, D)
            k = self.qkv[:, qw:qw + kvw].view(1, d.kv_heads, d.head_dim)                  # (1, KV, D)
            tk.norm_rope(q, L["q_norm"], self.pos, EPS, THETA, out=self.qr)
            tk.norm_rope(k, L["k_norm"], self.pos, EPS, THETA, out=self.kr)
            kc[:, p].copy_(self.kr[0])                                                    # the cache append: torch
            vc[:, p].copy_(self.qkv[0, qw + kvw:].view(d.kv_heads, d.head_dim))
            tk.decode_attention(self.qr[0], kc, vc, self.seq_len, out=self.attn, workspace=self.attn_ws)
            tk.linear(self.attn.view(1, qw), L["o"], residual=r, out=r)                   # r += o-projection
            tk.rms_norm_linear(r, L["ln2"], L["gate_up"], EPS, out=self.gu)               # (1, 2 I)
            tk.silu_mul_linear(self.gu, L["down"], residual=r, out=r)                     # r += down-projection
        tk.linear_argmax(r, w["embed"], norm_weight=w["final"], eps=EPS, out=self.next, logprobs_out=self.logprob)
        return self.next

    def logits(self) -> torch.Tensor:
        """The logits of the last step (tied head), computed from its final residual stream."""
        return tk.rms_norm_linear(self.r, self.w["final"], self.w["embed"], EPS)


class TorchStep:
    """The same step in eager PyTorch, allocating as it goes."""

    def __init__(self, d: Dims, w: dict, kv: list, device, dtype):
        self.d, self.w, self.kv = d, w, kv
        self.token = torch.tensor([7], device=device)
        inv_freq = THETA ** (-torch.arange(0, d.head_dim, 2, device=device, dtype=torch.float32) / d.head_dim)
        self.inv_freq, self.position, self.dtype = inv_freq, torch.tensor([d.context], device=device), dtype

    def __call__(self) -> torch.Tensor:
        d, w = self.d, self.w
        qw, kvw, p = d.heads * d.head_dim, d.kv_heads * d.head_dim, d.context
        angle = self.position[:, None].float() * self.inv_freq                 # (1, D/2), once a step
        cos = torch.cat([angle.cos(), angle.cos()], -1).to(self.dtype)[:, None]  # (1, 1, D)
        sin = torch.cat([angle.sin(), angle.sin()], -1).to(self.dtype)[:, None]
        r = F.embedding(self.token, w["embed"])                                # (1, hidden)
        delta = None
        for L, (kc, vc) in zip(w["layers"], self.kv):
            if delta is not None:
                r = r + delta
            y = F.rms_norm(r, (d.hidden,), L["ln1"], EPS)
            q, k, v = F.linear(y, L["qkv"]).split([qw, kvw, kvw], -1)
            q = F.rms_norm(q.view(1, d.heads, d.head_dim), (d.head_dim,), L["q_norm"], EPS)   # (1, H, D)
            k = F.rms_norm(k.view(1, d.kv_heads, d.head_dim), (d.head_dim,), L["k_norm"], EPS)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            kc[:, p] = k[0]
            vc[:, p] = v.view(d.kv_heads, d.head_dim)
            attn = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kc[None, :, :p + 1], vc[None, :, :p + 1],
                                                  enable_gqa=True)             # (1, H, 1, D)
            r = r + F.linear(attn.reshape(1, qw), L["o"])
            y = F.rms_norm(r, (d.hidden,), L["ln2"], EPS)
            gu = F.linear(y, L["gate_up"])
            delta = F.linear(F.silu(gu[:, :d.inter]) * gu[:, d.inter:], L["down"])
        y = F.rms_norm(r + delta, (d.hidden,), w["final"], EPS)
        logits = F.linear(y, w["embed"])
        logits.argmax(-1)
        return logits


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], -1)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(b.norm().item(), math.ulp(1.0)))
