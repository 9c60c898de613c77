"""The Qwen3 forward pass, every operation a `tilesafe.kernels` call.

One function runs the decoder over M rows of tokens with preallocated activations
(`Activations`), so the same code serves a ragged prefill (the prompts of a wave packed one
after another, M = their total length: every projection, norm and MLP runs once over all
rows, attention per prompt) and a batched decode step (M = batch, one new token per
sequence, attention over each sequence's cache). Every call passes `out=`: nothing is
allocated inside a step, which is what lets a decode step be captured in `ts.graph()`.

Per layer (E hidden, H/HKV heads of D, I intermediate):
    x = rms_norm(h + residual)                 residual += h  (one fused kernel)
    qkv = x @ Wqkv.T                           (M, (H + 2 HKV) D), one GEMM
    q, k = rope(rms_norm(q)), rope(rms_norm(k)) per head
    cache[slot] = k, v;  a = attention(q, cache)    one write, one attention for all rows
    (decode: the norms, RoPE and cache write are one kernel, `norm_rope_kv_write`; prefill:
    `norm_rope` for q and for k, then `paged_kv_write`, since flash attention reads k too)
    h = a @ Wo.T;  x = rms_norm(h + residual)
    h = (silu(x @ Wg.T) * (x @ Wu.T)) @ Wd.T   gate/up as one GEMM
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels.paged_prefill import paged_prefill_attention

from .checkpoint import Weights
from .config import Qwen3Config
from .kv_cache import KVCache
from .sampler import Sampler


@dataclass(slots=True)
class Activations:
    """Every intermediate of a forward over M rows (tokens), preallocated."""
    inputs: torch.Tensor       # (5, M) i32: ids, positions, lens, slots, tables below are its rows (one copy)
    ids: torch.Tensor          # (M,) i32 token ids
    positions: torch.Tensor    # (M,) i32 position of each row
    lens: torch.Tensor         # (M,) i32 cache length after this step (decode: positions + 1)
    slots: torch.Tensor        # (M,) i32 cache row of each row's key and value: slot * max_model_len + position
    tables: torch.Tensor       # (M, 1) i32 block table of decode row i: [its cache slot] (initially [i])
    residual: torch.Tensor     # (M, E) the residual stream
    x: torch.Tensor            # (M, E) normed input of a block
    h: torch.Tensor            # (M, E) output of a block
    qkv: torch.Tensor          # (M, (H + 2 HKV) D)
    qr: torch.Tensor           # (M, H, D) q after its per-head norm and RoPE
    kr: torch.Tensor           # (M, HKV, D)
    attn: torch.Tensor         # (M, H, D)
    gu: torch.Tensor           # (M, 2 I) gate then up
    act: torch.Tensor          # (M, I) silu(gate) * up
    last: torch.Tensor         # (R,) i32 the row of each sequence's last token (prefill)
    h_last: torch.Tensor       # (R, E) those rows of h, residual and the final norm
    res_last: torch.Tensor     # (R, E)
    x_last: torch.Tensor       # (R, E)
    logits: torch.Tensor       # (R, V) R = sequences, whose next token is wanted
    tokens: torch.Tensor       # (R,) i32 next tokens
    chosen: torch.Tensor       # (R,) f32 log-probability of each chosen token

    @classmethod
    def allocate(cls, cfg: Qwen3Config, m: int, r: int, dtype, device) -> "Activations":
        e, d = cfg.hidden_size, cfg.head_dim
        h, kv, i, v = cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size, cfg.vocab_size

        def buf(*shape, dt=dtype):
            return torch.empty(shape, dtype=dt, device=device)
        inputs = buf(5, m, dt=torch.int32)
        inputs[4].copy_(torch.arange(m, dtype=torch.int32))                   # host -> device: row i in slot i
        return cls(inputs=inputs, ids=inputs[0], positions=inputs[1], lens=inputs[2], slots=inputs[3],
                   tables=inputs[4].view(m, 1),
                   residual=buf(m, e), x=buf(m, e), h=buf(m, e), qkv=buf(m, (h + 2 * kv) * d),
                   qr=buf(m, h, d), kr=buf(m, kv, d), attn=buf(m, h, d), gu=buf(m, 2 * i),
                   act=buf(m, i), last=buf(r, dt=torch.int32), h_last=buf(r, e), res_last=buf(r, e),
                   x_last=buf(r, e), logits=buf(r, v), tokens=buf(r, dt=torch.int32),
                   chosen=buf(r, dt=torch.float32))


@dataclass(slots=True)
class DecodeWorkspace:
    attention: object     # tk.paged_decode_workspace(...): per-split partials of the batch's attention


# On the CPU the interpreters run a kernel's blocks one after another, each op a Python call:
# the library's CPU tiles (small, so tests exercise every loop) make the LM head over Qwen3's
# 151936 columns thousands of blocks. Wide tiles there, and two splits of decode attention
# (the GPU's split count would be mostly empty blocks), make the CPU demo ~10x faster.
CPU_LM_HEAD = {"block_n": 1024, "block_k": 64}
CPU_DECODE_SPLITS = 2
# Decode batches up to this many rows run the fused layer (`_forward_fused`). One row only:
# on the H200 (benchmarks/probes/decode_fusions.py) the fused GEMVs' tensor-core form for
# 2..16 rows ran a layer 2-4x slower than the unfused sequence (8B, 8 rows: 424 against
# 111 us), while at one row the fused layer saves its launches.
FUSED_ROWS = 1
# Which RMSNorms of a fused step are the prologue of the GEMV after them (rms_norm_linear's
# late form, linear_fusions.NORM_LATE; linear_argmax's norm_weight): a set of "qkv",
# "gate_up", "lm_head"; True: all three; False: none, each norm its own rms_norm kernel first;
# None (the default): DECODE_FORMS' choice for the model's shape.
NORM_PROLOGUE: bool | frozenset | set | None = None
NORM_GEMVS = frozenset({"qkv", "gate_up", "lm_head"})
# True makes SiLU-mul the prologue of the down projection (silu_mul_linear); False runs
# silu_mul first, then the down GEMV with its residual epilogue. Every block of the down GEMV
# recomputes silu over the whole intermediate row. None (the default): DECODE_FORMS' choice.
SILU_PROLOGUE: bool | None = None
# (hidden, intermediate) -> (the norms folded, SiLU-mul as the prologue): the fastest form the
# H200 measured for that shape (batch-1 step, benchmarks/probes/decode_step_variants.py,
# session 17 rounds 1-2); other shapes, unmeasured, keep DEFAULT_FORM (session 16's form).
DECODE_FORMS = {
    (1024, 3072): (NORM_GEMVS, True),           # Qwen3-0.6B: norms apart 0.879 ms, folded 0.821; SiLU apart 0.830
    (2560, 9728): (frozenset({"qkv"}), False),  # Qwen3-4B: 2.660 apart; qkv's folded 2.622 (gate/up's 2.761,
}                                               # all 2.749); SiLU apart 2.625 against 2.656
DEFAULT_FORM = (frozenset(), True)


# The weights are frozen (ts.freeze) when a model is made: no kernel writes them again (a write
# of a weight through tilesafe is refused from then on), so a PDL kernel may load them before it
# waits for the kernel before it (matmul.GEMV_EARLY, off by default). Measured with them frozen:
# 4B 2.619 ms a step (H200, session 18 round 1), as session 17's 2.623.
FREEZE_WEIGHTS = True


def freeze_weights(w: Weights) -> None:
    """ts.freeze every tensor of `w` (waits for the writes still queued, once)."""
    for t in (w.embed, w.norm, w.lm_head):
        ts.freeze(t)
    for layer in w.layers:
        for f in fields(layer):
            ts.freeze(getattr(layer, f.name))


class Qwen3Model:
    """The decoder over packed weights and a KV cache."""

    def __init__(self, cfg: Qwen3Config, weights: Weights, cache: KVCache, sampler: Sampler | None, tp=None):
        # With tensor parallelism (`tp`, a parallel.TensorParallel) cfg, weights and cache are
        # this rank's share, a.ids are shifted by `vocab_start`, and only rank 0 has a sampler.
        self.cfg, self.w, self.cache, self.sampler, self.tp = cfg, weights, cache, sampler, tp
        if FREEZE_WEIGHTS:
            freeze_weights(weights)
        self.vocab_start = 0 if tp is None else tp.vocab_start
        self.on_cpu = weights.embed.device.type == "cpu"

    def prefill(self, a: Activations, starts: list[int], sample: bool = True) -> None:
        """Run prompts packed in a.ids — prompt i at rows starts[i] .. starts[i+1]-1, positions
        0.. — into cache slots 0, 1, ...; a.last holds each prompt's last row. Each prompt's
        next token (sampled with its slot's sampler row) lands in a.tokens / a.chosen; with
        `sample` False only the a.last rows' logits are written (`prefill_paged`)."""
        L = self.cache.max_model_len
        a.slots.copy_(torch.cat([i * L + torch.arange(e - s, dtype=torch.int32)             # host -> device
                                 for i, (s, e) in enumerate(zip(starts, starts[1:]))]))
        self.prefill_paged(a, starts, [0] * (len(starts) - 1), None, sample)

    def prefill_paged(self, a: Activations, starts: list[int], cached: list[int], tables, sample: bool = True,
                      lens=None, workspace=None) -> None:
        """Prefill chunks of sequences through a paged cache: sequence i's rows starts[i] ..
        starts[i+1]-1 are its positions cached[i] .., each row's cache row is in a.slots (the
        caller's slot mapping), and its keys before cached[i] are in the cache already, read
        through row i of `tables` (R, max_blocks) i32 (None when nothing is cached). a.last
        holds each chunk's last row, whose next token lands in a.tokens / a.chosen.

        A step's decode rows ride along as chunks of one token after a cached prefix: the
        trailing run of such chunks attends in one `paged_decode_attention` over the batch
        (what a decode step runs), so the projections and MLP run once over all the step's
        tokens. `sample=False` stops at the logits (a.logits): a captured prefill graph
        samples after its replay, with its sequence's sampler row (prefill_graphs).

        Rows past starts[-1] are padding (a step padded to a token bucket, so that its
        kernels see a fixed set of row counts): computed row by row like the others, attended
        by nobody; give them slot -1 in a.slots so that they write no cache row.

        `lens`: the decode rows' cache lengths (cached + 1) as a device tensor the caller
        filled (a captured step reads them from its buffer; None: made here from `cached`),
        `workspace`: their attention's scratch (tk.paged_decode_workspace; None: allocated per
        call) — a capture allocates nothing."""
        n_chunks = len(starts) - 1
        tail = n_chunks                                   # chunks tail.. are one token after a prefix
        while tail > 0 and cached[tail - 1] and starts[tail] - starts[tail - 1] == 1:
            tail -= 1
        tail = tail if n_chunks - tail > 1 else n_chunks  # one such chunk: the prefill kernel serves it
        if tail == n_chunks:
            lens = None
        elif lens is None:
            lens = torch.tensor([c + 1 for c in cached[tail:]], dtype=torch.int32, device=a.ids.device)

        def attend(n: int, layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
            eps, theta = self.cfg.rms_norm_eps, self.cfg.rope_theta
            k_cache, v_cache = self.cache.k[n], self.cache.v[n]
            tk.norm_rope(q, layer.q_norm, a.positions, eps, theta, out=a.qr)   # per-head norm + RoPE
            tk.norm_rope(k, layer.k_norm, a.positions, eps, theta, out=a.kr)
            # Every chunk's keys and values in one launch, each row to its slot.
            tk.paged_kv_write(k_cache, v_cache, a.kr, v, a.slots, check="device")
            for i in range(tail):
                s, e = starts[i], starts[i + 1]
                if cached[i]:   # a prefix in the cache: the chunk's queries read every key through the table
                    paged_prefill_attention(a.qr[s:e], k_cache, v_cache, tables, cached[i], row=i, out=a.attn[s:e])
                else:
                    tk.flash_attention(a.qr[s:e].transpose(0, 1), a.kr[s:e].transpose(0, 1),
                                       v[s:e].transpose(0, 1), causal=True,
                                       out=a.attn[s:e].transpose(0, 1))   # (H, T_i, D) views
            if lens is not None:   # the decode rows: one query each, in one launch
                s, e = starts[tail], starts[-1]
                tk.paged_decode_attention(a.qr[s:e], k_cache, v_cache, tables[tail:], lens, out=a.attn[s:e],
                                          workspace=workspace)
        self._forward(a, attend, gather_last=True, sample=sample)

    def decode_workspace(self, a: Activations):
        """The attention scratch of `decode` for a's batch (allocate once, before a capture)."""
        return DecodeWorkspace(tk.paged_decode_workspace(a.qr, self.cache.k[0], max_len=self.cache.max_model_len,
                                                         splits=CPU_DECODE_SPLITS if self.on_cpu else None))

    def decode(self, a: Activations, workspace, greedy: bool = False) -> None:
        """One token per sequence: row i is the sequence in cache slot a.tables[i, 0], its new
        token a.ids[i] at a.positions[i], written at cache row a.slots[i] (= slot *
        max_model_len + positions[i]); the cache then holds a.lens[i] = positions[i] + 1 rows
        of it. One
        write and one attention launch per layer serve the whole batch (`workspace` from
        `decode_workspace(a)`). `greedy` (every row's sampling is greedy) takes each token
        straight from the LM head (`linear_argmax`): no logits are written."""
        def attend(n: int, layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
            k_cache, v_cache = self.cache.k[n], self.cache.v[n]                  # (S, L, HKV, D)
            # q's and k's norms and RoPE, k and v into their cache rows: one launch.
            tk.norm_rope_kv_write(q, k, v, layer.q_norm, layer.k_norm, a.positions, a.slots, k_cache, v_cache,
                                  self.cfg.rms_norm_eps, self.cfg.rope_theta, q_out=a.qr)
            tk.paged_decode_attention(a.qr, k_cache, v_cache, a.tables, a.lens, out=a.attn,
                                      workspace=workspace.attention)
        if self.tp is None and a.ids.shape[0] <= FUSED_ROWS:
            self._forward_fused(a, attend, greedy)
        else:
            self._forward(a, attend, gather_last=False)

    def decode_form(self) -> tuple[frozenset, bool]:
        """(the GEMVs of NORM_GEMVS whose norm is their prologue, whether SiLU-mul is the down
        GEMV's prologue): NORM_PROLOGUE and SILU_PROLOGUE where set, else DECODE_FORMS' entry
        for this model's shape (DEFAULT_FORM where it has none). Read once per step."""
        norms, silu = DECODE_FORMS.get((self.cfg.hidden_size, self.cfg.intermediate_size), DEFAULT_FORM)
        if NORM_PROLOGUE is not None:
            norms = (NORM_GEMVS if NORM_PROLOGUE else frozenset()) if isinstance(NORM_PROLOGUE, bool) \
                else NORM_PROLOGUE
        return norms, silu if SILU_PROLOGUE is None else bool(SILU_PROLOGUE)

    def _forward_fused(self, a: Activations, attend, greedy: bool) -> None:
        """`_forward` for a few rows (decode), in as few as four GEMV launches a layer: each
        norm the prologue of the projection after it, SiLU-mul the prologue of the down
        projection (as `decode_form` says), and the residual add the epilogue of the o
        and down projections (a.residual += h, in place), so no add kernel runs between them.
        It computes what `_forward` computes: every fused step rounds where the separate
        kernel stores, except the late norm prologue (x * g rounded, the product scaled once)."""
        cfg, w = self.cfg, self.w
        eps, m = cfg.rms_norm_eps, a.ids.shape[0]
        hd, kvd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        folded, silu_prologue = self.decode_form()

        def norm_linear(g: torch.Tensor, wt: torch.Tensor, out: torch.Tensor, gemv: str) -> None:   # norm(res) @ wt.T
            if gemv in folded:
                tk.rms_norm_linear(a.residual, g, wt, eps, out=out)
            else:
                tk.rms_norm(a.residual, g, eps, out=a.x)
                tk.linear(a.x, wt, out=out)
        tk.embedding(a.ids, w.embed, out=a.residual)                                # (M, E)
        for n, layer in enumerate(w.layers):
            norm_linear(layer.input_norm, layer.qkv, a.qkv, "qkv")                  # (M, (H + 2 HKV) D)
            q = a.qkv[:, :hd].view(m, cfg.num_heads, cfg.head_dim)                  # (M, H, D) views
            k = a.qkv[:, hd:hd + kvd].view(m, cfg.num_kv_heads, cfg.head_dim)       # (M, HKV, D)
            v = a.qkv[:, hd + kvd:].view(m, cfg.num_kv_heads, cfg.head_dim)         # (M, HKV, D)
            attend(n, layer, q, k, v)                                               # a.attn (M, H, D)
            tk.linear(a.attn.view(m, hd), layer.o, residual=a.residual, out=a.residual)   # residual += o(attn)
            norm_linear(layer.post_norm, layer.gate_up, a.gu, "gate_up")            # (M, 2 I)
            if silu_prologue:
                tk.silu_mul_linear(a.gu, layer.down, residual=a.residual, out=a.residual)  # residual += mlp
            else:
                half = a.gu.shape[1] // 2
                tk.silu_mul(a.gu[:, :half], a.gu[:, half:], out=a.act)
                tk.linear(a.act, layer.down, residual=a.residual, out=a.residual)
        head, fold = CPU_LM_HEAD if self.on_cpu else None, "lm_head" in folded
        if greedy and fold:   # the token and its log-probability straight from the LM head
            tk.linear_argmax(a.residual, w.lm_head, norm_weight=w.norm, eps=eps, out=a.tokens,
                             logprobs_out=a.chosen, config=head)
        elif greedy:
            tk.rms_norm(a.residual, w.norm, eps, out=a.x)
            tk.linear_argmax(a.x, w.lm_head, out=a.tokens, logprobs_out=a.chosen, config=head)
        else:
            if fold:
                tk.rms_norm_linear(a.residual, w.norm, w.lm_head, eps, out=a.logits, config=head)   # (M, V)
            else:
                tk.rms_norm(a.residual, w.norm, eps, out=a.x)
                tk.linear(a.x, w.lm_head, out=a.logits, config=head)                # (M, V)
            self.sampler(a.logits, a.tokens, a.chosen)                              # (M,)

    def _forward(self, a: Activations, attend, gather_last: bool, sample: bool = True) -> None:
        cfg, w = self.cfg, self.w
        eps, m = cfg.rms_norm_eps, a.ids.shape[0]
        hd, kvd, inter = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size
        tk.embedding(a.ids, w.embed, out=a.residual)                                # (M, E)
        if self.tp:                                     # each rank gathered its vocabulary rows
            self.tp.all_reduce(a.residual)
        for n, layer in enumerate(w.layers):
            if n == 0:
                tk.rms_norm(a.residual, layer.input_norm, eps, out=a.x)
            else:   # residual += h; x = norm(residual)
                tk.rms_norm(a.h, layer.input_norm, eps, residual=a.residual, out=a.x, residual_out=a.residual)
            tk.linear(a.x, layer.qkv, out=a.qkv)                                    # (M, (H + 2 HKV) D)
            q = a.qkv[:, :hd].view(m, cfg.num_heads, cfg.head_dim)                  # (M, H, D) views
            k = a.qkv[:, hd:hd + kvd].view(m, cfg.num_kv_heads, cfg.head_dim)       # (M, HKV, D)
            v = a.qkv[:, hd + kvd:].view(m, cfg.num_kv_heads, cfg.head_dim)         # (M, HKV, D)
            attend(n, layer, q, k, v)                                               # a.attn (M, H, D)
            tk.linear(a.attn.view(m, hd), layer.o, out=a.h)                         # (M, E)
            if self.tp:                                 # row-parallel: partial sums
                self.tp.all_reduce(a.h)
            tk.rms_norm(a.h, layer.post_norm, eps, residual=a.residual, out=a.x, residual_out=a.residual)
            tk.linear(a.x, layer.gate_up, out=a.gu)                                 # (M, 2 I)
            tk.silu_mul(a.gu[:, :inter], a.gu[:, inter:], out=a.act)                # (M, I)
            tk.linear(a.act, layer.down, out=a.h)                                   # (M, E)
            if self.tp:
                self.tp.all_reduce(a.h)
        if gather_last:     # the rows whose next token is wanted: each prompt's last
            tk.embedding(a.last, a.h, out=a.h_last)                                 # (R, E) row gather
            tk.embedding(a.last, a.residual, out=a.res_last)
            h, res, x = a.h_last, a.res_last, a.x_last
        else:
            h, res, x = a.h, a.residual, a.x
        tk.rms_norm(h, w.norm, eps, residual=res, out=x, residual_out=res)
        tk.linear(x, w.lm_head, out=a.logits, config=CPU_LM_HEAD if self.on_cpu else None)   # (R, V)
        logits = a.logits if self.tp is None else self.tp.gather_logits(a.logits)   # (R, V) on rank 0
        if self.sampler is not None and sample:
            self.sampler(logits, a.tokens, a.chosen)                                # (R,) rows 0..R-1
