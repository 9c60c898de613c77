"""A plain-PyTorch Qwen3 decode step and prefill — the baselines `benchmarks/engine.py` compares with.

The decode step shares the engine's packed weight tensors (no second copy of the model), keeps its own
static KV cache of `max_len` rows, and runs cuBLAS GEMVs (F.linear), torch's RMSNorm and
SDPA over the whole cache with a mask of the positions written so far; the whole step is
captured in one CUDA graph and replayed. `step_seconds` times one replay with CUDA events.
`greedy_logits` runs the same step eagerly and keeps every step's logits (the engine's
correctness gate, `engine_check.py`). `LeanTorchQwen3Step` is the same math in fewer kernels,
`CompiledTorchQwen3Step` that with each layer's glue fused by `torch.compile` (one compiled
per-layer function for all layers; GEMMs still cuBLAS, attention still SDPA; the whole step
still one CUDA graph captured here). `TorchQwen3Prefill` runs a prompt in one pass (cuBLAS
GEMMs, SDPA causal attention, the cache written) for the prefill comparison.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class _OverEngineWeights:
    """What both baselines hold: the engine's weights, a static KV cache of `max_len` rows per
    layer and RoPE's inverse frequencies (one place, so the step and the prefill agree)."""

    def __init__(self, llm, max_len: int):
        cfg, dev, dt = llm.config, llm.device, llm.dtype
        self.cfg, self.w, self.max_len = cfg, llm.model.w, max_len
        shape = (1, cfg.num_kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_layers)]
        self.v = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_layers)]
        half = cfg.head_dim // 2
        self.inv_freq = cfg.rope_theta ** (-torch.arange(half, device=dev, dtype=torch.float32) * 2 / cfg.head_dim)


class TorchQwen3Step(_OverEngineWeights):
    def __init__(self, llm, max_len: int):
        super().__init__(llm, max_len)
        dev = llm.device
        self.ids = torch.zeros(1, dtype=torch.long, device=dev)          # static inputs of the graph
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.token = torch.zeros(1, dtype=torch.long, device=dev)
        self.graph = None

    def _rope(self, x, cos, sin):                                        # x (1, heads, 1, D)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)

    def _step(self) -> torch.Tensor:
        cfg, w = self.cfg, self.w
        e, d, h, kv, inter = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size
        eps = cfg.rms_norm_eps
        angle = self.pos.float()[:, None] * self.inv_freq                  # (1, D/2)
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)     # (1, D)
        mask = (torch.arange(self.max_len, device=self.pos.device) <= self.pos).view(1, 1, 1, -1)   # (1, 1, 1, L)
        res = F.embedding(self.ids, w.embed)                                # (1, E)
        for n, layer in enumerate(w.layers):
            x = F.rms_norm(res, (e,), layer.input_norm, eps)
            qkv = F.linear(x, layer.qkv)                                    # (1, (H + 2 KV) D)
            q = F.rms_norm(qkv[:, :h * d].view(1, h, 1, d), (d,), layer.q_norm, eps)
            k = F.rms_norm(qkv[:, h * d:(h + kv) * d].view(1, kv, 1, d), (d,), layer.k_norm, eps)
            v = qkv[:, (h + kv) * d:].view(1, kv, 1, d)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.k[n].index_copy_(2, self.pos, k)                           # cache row `pos`
            self.v[n].index_copy_(2, self.pos, v)
            a = F.scaled_dot_product_attention(q, self.k[n], self.v[n], attn_mask=mask, enable_gqa=True)
            res = res + F.linear(a.reshape(1, h * d), layer.o)
            x = F.rms_norm(res, (e,), layer.post_norm, eps)
            gu = F.linear(x, layer.gate_up)                                 # (1, 2 I)
            res = res + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], layer.down)
        logits = F.linear(F.rms_norm(res, (e,), w.norm, eps), w.lm_head)    # (1, V)
        self.token.copy_(logits.argmax(-1))
        return logits

    def capture(self) -> None:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.inference_mode():
            for _ in range(3):                                              # warm-up off the default stream
                self._step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.inference_mode():
            self._step()

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """Greedy tokens after `prompt`, one replayed step per token (the prompt's too): the
        correctness check of `benchmarks/engine.py` compares them with the engine's."""
        on_gpu = self.pos.is_cuda                     # on the CPU (a check of this file) each step runs eagerly
        if on_gpu and self.graph is None:
            self.capture()
        out = []
        for p, t in enumerate(prompt + [0] * (n - 1)):
            self.ids.fill_(t if p < len(prompt) else out[-1])
            self.pos.fill_(p)
            if on_gpu:
                self.graph.replay()
            else:
                with torch.inference_mode():
                    self._step()
            if p >= len(prompt) - 1:
                out.append(int(self.token.item()))
        return out

    def greedy_logits(self, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
        """Greedy tokens after `prompt` and the float32 logits (n, V) each was chosen from, every
        step run eagerly (no graph: the logits are not a graph output)."""
        tokens, rows = [], []
        with torch.inference_mode():
            for p, t in enumerate(prompt + [0] * (n - 1)):
                self.ids.fill_(t if p < len(prompt) else tokens[-1])
                self.pos.fill_(p)
                logits = self._step()
                if p >= len(prompt) - 1:
                    rows.append(logits[0].float())
                    tokens.append(int(self.token.item()))
        return tokens, torch.stack(rows)

    def teacher_forced_logits(self, seq: list[int]) -> torch.Tensor:
        """Each position's float32 logits (len(seq), V) with `seq` fed as the tokens, every step
        run eagerly: what the lean step is checked against the plain one with (tests, probe)."""
        rows = []
        with torch.inference_mode():
            for p, t in enumerate(seq):
                self.ids.fill_(t)
                self.pos.fill_(p)
                rows.append(self._step()[0].to(torch.float32, copy=True))
        return torch.stack(rows)

    def step_seconds(self, context: int, reps: int = 50) -> float:
        """One replayed step at position `context - 1` (attention masks the rows after it;
        SDPA still reads the whole static cache, as a fixed-shape graph must)."""
        if self.graph is None:
            self.capture()
        self.pos.fill_(context - 1)
        for _ in range(3):
            self.graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            self.graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / reps


class LeanTorchQwen3Step(TorchQwen3Step):
    """The same decode step as `TorchQwen3Step` (same cache layout, positions and math) written as
    a careful PyTorch user would, still plain ops under one CUDA graph: cos/sin rows precomputed
    for every position and gathered by the device `pos`; q and k normed and rotated together in
    one float pass (RoPE's rotation a `roll` against a sign-folded sin, no cat/neg; one rounding
    to the model's dtype, written into a buffer the layers share); attention with each KV head a
    batch row and its query heads that row's queries (exact GQA, no `enable_gqa`, no repeated k/v;
    a fused backend's (B, M, H, D) output is then already o's input row) and an additive mask in
    the model's dtype, sliced from a 16-aligned buffer, so a fused SDPA backend (memory-efficient /
    cuDNN) can take it instead of the math fallback; the residual added by the o and down GEMMs
    in place (`addmm_`, beta = 1: one kernel each, summed in float, rounded once)."""

    def __init__(self, llm, max_len: int):
        super().__init__(llm, max_len)
        cfg, dev, dt = self.cfg, llm.device, llm.dtype
        angle = torch.arange(max_len, device=dev, dtype=torch.float32)[:, None] * self.inv_freq   # (L, D/2)
        self.cos = torch.cat([angle.cos()] * 2, -1)                          # (L, D), float32
        self.sin = torch.cat([-angle.sin(), angle.sin()], -1)                # the rotation's sign folded in
        h, kv = cfg.num_heads, cfg.num_kv_heads
        self.qk_norm = [torch.cat([layer.q_norm.float().expand(h, -1), layer.k_norm.float().expand(kv, -1)])
                        for layer in self.w.layers]                           # (H + KV, D) float32 per layer
        self.qk = torch.empty(h + kv, cfg.head_dim, device=dev, dtype=dt)  # each layer's rotated q and k
        self.cols = torch.arange(max_len, device=dev)
        self.mask_zero = torch.zeros((), device=dev, dtype=dt)
        self.mask_off = torch.full((), float("-inf"), device=dev, dtype=dt)
        padded = -(-max_len // 16) * 16                                      # mem-efficient SDPA: aligned rows
        self.mask = torch.zeros(1, 1, 1, padded, device=dev, dtype=dt)[..., :max_len]

    def _step(self) -> torch.Tensor:
        cfg, w = self.cfg, self.w
        e, d, h, kv, inter = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size
        eps, g = cfg.rms_norm_eps, cfg.num_heads // cfg.num_kv_heads
        cos, sin = self.cos.index_select(0, self.pos), self.sin.index_select(0, self.pos)   # (1, D)
        torch.where(self.cols <= self.pos, self.mask_zero, self.mask_off, out=self.mask[0, 0, 0])
        res = F.embedding(self.ids, w.embed)                                # (1, E)
        for n, layer in enumerate(w.layers):
            x = F.rms_norm(res, (e,), layer.input_norm, eps)
            qkv = F.linear(x, layer.qkv)                                    # (1, (H + 2 KV) D)
            qk = F.rms_norm(qkv[0, :(h + kv) * d].view(h + kv, d), (d,), None, eps) * self.qk_norm[n]  # float
            qk = torch.addcmul(qk * cos, qk.roll(d // 2, -1), sin, out=self.qk)   # (H + KV, D) in dt: rotated
            q = qk[:h].view(kv, 1, g, d)            # KV head j a batch row, its query heads that row's queries
            self.k[n].index_copy_(2, self.pos, qk[h:].view(1, kv, 1, d))   # cache row `pos`
            self.v[n].index_copy_(2, self.pos, qkv[:, (h + kv) * d:].view(1, kv, 1, d))
            cache = (kv, 1, self.max_len, d)
            a = F.scaled_dot_product_attention(q, self.k[n].view(cache), self.v[n].view(cache),
                                               attn_mask=self.mask)         # (KV, 1, G, D)
            res.addmm_(a.reshape(1, h * d), layer.o.t())                   # in place: no copy of res first
            x = F.rms_norm(res, (e,), layer.post_norm, eps)
            gu = F.linear(x, layer.gate_up)                                 # (1, 2 I)
            res.addmm_(F.silu(gu[:, :inter]) * gu[:, inter:], layer.down.t())
        logits = F.linear(F.rms_norm(res, (e,), w.norm, eps), w.lm_head)    # (1, V)
        self.token.copy_(logits.argmax(-1))
        return logits


def _add(res, y):
    """res + y, rounded once. Written as a float add so that Inductor fuses it into the RMSNorm
    kernel that follows: `res + mm(...)` in the model's dtype matches its addmm pattern, and an
    addmm out of place copies `res` into its output first (a memcpy a residual)."""
    return (res.float() + y.float()).to(res.dtype)


def _qk_v_cached(x, qkv_w, qk_norm, kv_cache, cos, sin, pos, dims):
    """The layer up to attention: the qkv GEMM, q/k RMSNorm and RoPE in float (one rounding), k and
    v written into row `pos` of the layer's cache (k and v one tensor (2, 1, KV, L, D): one write).
    Returns q as (KV, G, D): KV head j's G query heads are its rows (exact GQA)."""
    h, kv, d, inter, eps = dims
    qkv = F.linear(x, qkv_w)                                                # (1, (H + 2 KV) D)
    qk = F.rms_norm(qkv[0, :(h + kv) * d].view(h + kv, d), (d,), None, eps) * qk_norm   # float
    qk = (qk * cos + qk.roll(d // 2, -1) * sin).to(x.dtype)                 # rotated, one rounding
    kv_cache.index_copy_(3, pos, torch.stack([qk[h:], qkv[0, (h + kv) * d:].view(kv, d)]).view(2, 1, kv, 1, d))
    return qk[:h].view(kv, h // kv, d)


def _after_attention(res, a, o_w, post_norm, gate_up_w, down_w, next_norm, dims):
    """The layer from attention's output a (KV, G, D) to the next layer's normed input."""
    h, kv, d, inter, eps = dims
    e = res.shape[-1]
    res = _add(res, F.linear(a.reshape(1, h * d), o_w))
    gu = F.linear(F.rms_norm(res, (e,), post_norm, eps), gate_up_w)        # (1, 2 I)
    res = _add(res, F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], down_w))
    return res, F.rms_norm(res, (e,), next_norm, eps)


def _layer(res, x, qkv_w, qk_norm, kv_cache, cos, sin, pos, mask, o_w, post_norm, gate_up_w, down_w,
           next_norm, dims):
    """One decoder layer of the lean step's math, from its normed input `x` (and residual `res`) to
    the next layer's normed input, attention by SDPA (the additive `mask`). Every tensor is an
    argument and `dims` (H, KV, D, I, eps) the only constant, so `torch.compile` traces it once
    for all layers (no guard on which layer's tensors it gets)."""
    q = _qk_v_cached(x, qkv_w, qk_norm, kv_cache, cos, sin, pos, dims)
    kv, g, d = q.shape
    cache = (kv, 1, kv_cache.shape[3], d)
    a = F.scaled_dot_product_attention(q.view(kv, 1, g, d), kv_cache[0].view(cache), kv_cache[1].view(cache),
                                       attn_mask=mask)                      # (KV, 1, G, D)
    return _after_attention(res, a, o_w, post_norm, gate_up_w, down_w, next_norm, dims)


def _layer_mm(res, x, qkv_w, qk_norm, kv_cache, cos, sin, pos, mask, o_w, post_norm, gate_up_w, down_w,
              next_norm, dims):
    """`_layer` with attention written as matmuls (as transformers' eager attention is): scores
    q k^T by cuBLAS bmm (KV batches of G query rows against the whole cache), scaled, masked past
    `pos` and softmaxed in float (one Inductor kernel), then p v by bmm. `mask` is unused."""
    q = _qk_v_cached(x, qkv_w, qk_norm, kv_cache, cos, sin, pos, dims)
    length, d = kv_cache.shape[3], kv_cache.shape[4]
    scores = torch.bmm(q, kv_cache[0, 0].transpose(1, 2)).float() * d ** -0.5   # (KV, G, L)
    scores = scores.masked_fill(torch.arange(length, device=scores.device) > pos, float("-inf"))
    a = torch.bmm(torch.softmax(scores, -1).to(q.dtype), kv_cache[1, 0])    # (KV, G, D)
    return _after_attention(res, a, o_w, post_norm, gate_up_w, down_w, next_norm, dims)


def _qk_rope(qkv, qk_norm, cos, sin, h: int, kv: int, d: int, eps: float):
    """The glue between the qkv GEMM and the cache write: q/k RMSNorm and RoPE, one rounding."""
    qk = F.rms_norm(qkv[0, :(h + kv) * d].view(h + kv, d), (d,), None, eps) * qk_norm
    return (qk * cos + qk.roll(d // 2, -1) * sin).to(qkv.dtype)            # (H + KV, D)


def _add_norm(res, y, weight, eps: float):
    """res + y (a GEMM's output) and its RMSNorm: one fused kernel under torch.compile."""
    res = res + y
    return res, F.rms_norm(res, (res.shape[-1],), weight, eps)


def _silu_mul(gu, inter: int):
    return F.silu(gu[:, :inter]) * gu[:, inter:]


class CompiledTorchQwen3Step(LeanTorchQwen3Step):
    """The lean step's math with each layer's glue fused by `torch.compile` (Inductor, default mode,
    fullgraph, static shapes): ONE per-layer function (`_layer`, weights and cache as arguments)
    compiled once and called by all layers, its GEMMs still cuBLAS (Inductor's extern mm/addmm; no
    max-autotune) and its attention torch's SDPA; the whole step then captured in one CUDA graph by
    `capture` as the other steps are. `compile=False` runs the same functions eagerly (the CPU check
    of the math; the default off a GPU). `compile_s` is the first (compiling) step's seconds;
    `graphs` how many graphs Dynamo compiled for it (1 here: a recompile per layer would show as more)."""
    whole = True          # the GEMMs and SDPA inside the compiled layer (False: only the glue compiled)
    mv = False            # the eager GEMVs as torch.mv(W, x) (glue-only variant and the LM head)
    layer_fn = staticmethod(_layer)                 # the compiled per-layer function (whole = True)

    def __init__(self, llm, max_len: int, compile: bool | None = None):
        super().__init__(llm, max_len)
        cfg, dev, dt = self.cfg, llm.device, llm.dtype
        if compile is None:                  # a CPU smoke run of engine.py: the same math, no C++ compile
            compile = torch.device(dev).type == "cuda"
        self.dims = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size, cfg.rms_norm_eps)
        shape = (2, 1, cfg.num_kv_heads, max_len, cfg.head_dim)             # k and v of a layer: one tensor
        self.kv = [torch.zeros(shape, device=dev, dtype=dt) for _ in range(cfg.num_layers)]
        self.k, self.v = [c[0] for c in self.kv], [c[1] for c in self.kv]    # the other steps' views
        wrap = (lambda f: torch.compile(f, fullgraph=True, dynamic=False)) if compile else (lambda f: f)
        self.layer, self.qk_rope, self.add_norm, self.silu_mul = (
            wrap(self.layer_fn), wrap(_qk_rope), wrap(_add_norm), wrap(_silu_mul))
        self.compile_s, self.graphs = None, None

    def _step(self) -> torch.Tensor:
        if self.compile_s is None:                   # the first step compiles: time it, count the graphs
            import time
            from torch._dynamo.utils import counters
            before, t0 = counters["stats"]["unique_graphs"], time.perf_counter()
            self.compile_s = 0.0
            out = self._step_body()
            if out.is_cuda:
                torch.cuda.synchronize()
            self.compile_s, self.graphs = time.perf_counter() - t0, counters["stats"]["unique_graphs"] - before
            return out
        return self._step_body()

    def _step_body(self) -> torch.Tensor:
        cfg, w = self.cfg, self.w
        e, eps = cfg.hidden_size, cfg.rms_norm_eps
        cos, sin = self.cos.index_select(0, self.pos), self.sin.index_select(0, self.pos)   # (1, D)
        torch.where(self.cols <= self.pos, self.mask_zero, self.mask_off, out=self.mask[0, 0, 0])
        res = F.embedding(self.ids, w.embed)                                # (1, E)
        x = F.rms_norm(res, (e,), w.layers[0].input_norm, eps)
        layers = w.layers
        for n, layer in enumerate(layers):
            nxt = layers[n + 1].input_norm if n + 1 < len(layers) else w.norm
            if self.whole:
                res, x = self.layer(res, x, layer.qkv, self.qk_norm[n], self.kv[n], cos, sin, self.pos,
                                    self.mask, layer.o, layer.post_norm, layer.gate_up, layer.down, nxt, self.dims)
            else:
                res, x = self._glue_layer(n, layer, res, x, cos, sin, nxt)
        logits = self._gemv(x, w.lm_head)                                   # (1, V)
        self.token.copy_(logits.argmax(-1))
        return logits

    def _gemv(self, x, weight):
        """x (1, K) @ weight (N, K).T: F.linear, or torch.mv(weight, x) with `mv` (cuBLAS's gemv)."""
        return torch.mv(weight, x[0])[None] if self.mv else F.linear(x, weight)

    def _glue_layer(self, n, layer, res, x, cos, sin, nxt):
        """The layer with only its glue compiled (`whole = False`): GEMMs, cache writes, SDPA eager."""
        h, kv, d, inter, eps = self.dims
        linear = self._gemv
        qkv = linear(x, layer.qkv)
        qk = self.qk_rope(qkv, self.qk_norm[n], cos, sin, h, kv, d, eps)
        self.k[n].index_copy_(2, self.pos, qk[h:].view(1, kv, 1, d))
        self.v[n].index_copy_(2, self.pos, qkv[:, (h + kv) * d:].view(1, kv, 1, d))
        cache = (kv, 1, self.max_len, d)
        a = F.scaled_dot_product_attention(qk[:h].view(kv, 1, h // kv, d), self.k[n].view(cache),
                                           self.v[n].view(cache), attn_mask=self.mask)
        res, x = self.add_norm(res, linear(a.reshape(1, h * d), layer.o), layer.post_norm, eps)
        gu = linear(x, layer.gate_up)
        return self.add_norm(res, linear(self.silu_mul(gu, inter), layer.down), nxt, eps)

    def capture(self) -> None:
        """Compile (the first warm-up step), then capture with Dynamo told to fail rather than
        recompile (a recompile inside the capture would also run a compile under it)."""
        with torch.inference_mode():
            self._step()
        torch.cuda.synchronize()
        with torch.compiler.set_stance("fail_on_recompile"):
            super().capture()


class CompiledMmTorchQwen3Step(CompiledTorchQwen3Step):
    """`CompiledTorchQwen3Step` with attention as matmuls (`_layer_mm`: cuBLAS bmm, the mask and
    softmax fused by Inductor) instead of SDPA, whose fused kernels run one block per KV head over
    the whole cache at batch 1 (14 µs a layer for 432 rows on the H200)."""
    layer_fn = staticmethod(_layer_mm)


class CompiledGlueTorchQwen3Step(CompiledTorchQwen3Step):
    """`CompiledTorchQwen3Step` with only the glue compiled (q/k norm + RoPE, residual add + the next
    RMSNorm, silu*mul: three small graphs); GEMMs, cache writes and SDPA stay eager ops."""
    whole = False


class CompiledGlueMvTorchQwen3Step(CompiledGlueTorchQwen3Step):
    """`CompiledGlueTorchQwen3Step` with its GEMVs as torch.mv(W, x): cuBLAS's gemv orientation,
    which may pick other kernels than F.linear's one-row GEMM (the probe times both)."""
    mv = True


STEPS = {"plain": TorchQwen3Step, "lean": LeanTorchQwen3Step,   # engine.py's --torch-step
         "compiled": CompiledTorchQwen3Step, "compiled_mm": CompiledMmTorchQwen3Step,
         "compiled_glue": CompiledGlueTorchQwen3Step,
         "compiled_glue_mv": CompiledGlueMvTorchQwen3Step}


class TorchQwen3Prefill(_OverEngineWeights):
    """One prompt of T tokens in one pass over the engine's weights: RMSNorm, cuBLAS GEMMs over
    all rows, per-head q/k norm and RoPE, k and v written into a static cache of `max_len` rows,
    SDPA causal attention (k/v repeated to the query heads, so the flash kernel serves any GQA),
    the LM head on the last row only, as the engine's prefill does."""

    @classmethod
    def beside(cls, step: TorchQwen3Step, max_len: int) -> "TorchQwen3Prefill":
        """The one-pass model over a decode baseline's own weights (the gate's second reference)."""
        from types import SimpleNamespace
        w = step.w
        return cls(SimpleNamespace(config=step.cfg, device=w.embed.device, dtype=w.embed.dtype,
                                   model=SimpleNamespace(w=w)), max_len)

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, all_rows: bool = False) -> torch.Tensor:
        """ids (T,) long on the device -> the next token's logits (1, V); every row's (T, V)
        with `all_rows` (the gate's second reference: the same model by another path)."""
        cfg, w = self.cfg, self.w
        e, d, h, kv, inter = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size
        eps, t = cfg.rms_norm_eps, ids.shape[0]
        angle = torch.arange(t, device=ids.device, dtype=torch.float32)[:, None] * self.inv_freq   # (T, D/2)
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)               # (T, D)

        def rope(x):                                                        # (1, heads, T, D)
            rotated = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
            return (x.float() * cos + rotated.float() * sin).to(x.dtype)
        res = F.embedding(ids, w.embed)                                     # (T, E)
        for n, layer in enumerate(w.layers):
            x = F.rms_norm(res, (e,), layer.input_norm, eps)
            qkv = F.linear(x, layer.qkv)                                # (T, (H + 2 KV) D)
            q = F.rms_norm(qkv[:, :h * d].view(t, h, d), (d,), layer.q_norm, eps).transpose(0, 1)[None]
            k = F.rms_norm(qkv[:, h * d:(h + kv) * d].view(t, kv, d), (d,), layer.k_norm, eps).transpose(0, 1)[None]
            v = qkv[:, (h + kv) * d:].view(t, kv, d).transpose(0, 1)[None]
            q, k = rope(q), rope(k)
            self.k[n][:, :, :t].copy_(k)
            self.v[n][:, :, :t].copy_(v)
            a = F.scaled_dot_product_attention(q, k.repeat_interleave(h // kv, 1), v.repeat_interleave(h // kv, 1),
                                               is_causal=True)          # (1, H, T, D)
            res = res + F.linear(a[0].transpose(0, 1).reshape(t, h * d), layer.o)
            x = F.rms_norm(res, (e,), layer.post_norm, eps)
            gu = F.linear(x, layer.gate_up)                             # (T, 2 I)
            res = res + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], layer.down)
        rows = res if all_rows else res[-1:]
        return F.linear(F.rms_norm(rows, (e,), w.norm, eps), w.lm_head)    # (1 or T, V)

    def seconds(self, t: int, reps: int = 2, seed: int = 1) -> float:
        """The best of `reps` timed passes over a random prompt of t tokens, after one warm-up."""
        import time
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(1000, 100000, (t,), generator=g).to(self.w.embed.device)
        self(ids)
        best = float("inf")
        sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            self(ids)
            sync()
            best = min(best, time.perf_counter() - t0)
        return best
