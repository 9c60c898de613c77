"""Prefill through CUDA graphs, one per token bucket: a prompt's forward pass is one replay.

An eager prefill pays the host cost of every library call (~15 a layer, tens of us each:
at 0.6B a 2048-token prefill is host-bound) and, for each new prompt length, compiles the
kernels that length specializes (tiles, masks, Triton's divisibility facts). Here a prompt
of n tokens runs padded to the smallest bucket B >= n of a fixed set (`bucket_sizes`:
16, 32, 64, 128, 256, then steps of a quarter of the power of two below, multiples of 128):
  * rows n .. B-1 are padding: token 0 at positions n .. B-1, cache slot -1 (the KV write
    skips them). Attention is causal, so no real row sees a padding row's key; every other
    operation works row by row. The real rows compute what an eager prefill of B rows
    computes, and the last real row (n - 1, read on the device) gives the logits;
  * the bucket's first prompt runs eagerly (compiling its kernels) and is then captured in
    `ts.graph()`; later prompts of that bucket copy their ids, slots and last row into the
    bucket's input buffer (one host-to-device copy) and replay it. `warm_up()` does the
    first run of every bucket ahead (ids 0, nothing written to the cache), so that no
    prompt compiles anything afterwards.
The next token is sampled after the replay with the sequence's sampler row (one launch;
rows differ per sequence, the graph does not). The buckets share one set of activation
buffers (views of its first rows), grown to the largest bucket used so far: replays run
one at a time on one stream. Without graphs (a CPU, `use_graph=False`) the same padded
passes run eagerly: that is how CI checks the padding.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import torch

import tilesafe as ts
import tilesafe.kernels as tk

from .model import Activations, Qwen3Model

SMALLEST = 16            # the first bucket: a tensor-core tile of rows
# Longer prompts prefill eagerly: the shared buffers of an 8192-row bucket are ~0.8 GB at 4B
# (gate/up alone 8192 x 19456 bf16), and at that length the GPU time dwarfs the host's.
MAX_GRAPH_TOKENS = 8192


def bucket_sizes(max_tokens: int) -> list[int]:
    """Buckets up to the first one >= max_tokens: 16, 32, 64, 128, 256, then steps of a
    quarter of the power of two below (384, 512, 640, ..., 1024, 1280, ..., 2048, 2560, ...):
    padding is under half a bucket below 256 tokens, at most a third from there and a fifth
    from 640; every size from 256 on is a multiple of 128 (whole attention and GEMM row
    tiles)."""
    sizes, b = [], SMALLEST
    while b < max_tokens:
        sizes.append(b)
        b = b * 2 if b < 256 else b + max(128, (1 << (b.bit_length() - 1)) // 4)
    return sizes + [b]


def buffer_bytes(cfg, max_tokens: int, dtype) -> int:
    """Device bytes PrefillGraphs(max_tokens=...) holds once its largest bucket has run: the
    shared activations of that bucket's rows (`Activations.allocate` on the meta device, views
    counted once) and every bucket's input buffer. LLM counts them before allocating."""
    sizes = bucket_sizes(max_tokens)
    a = Activations.allocate(cfg, sizes[-1], 1, dtype, "meta")
    tensors = [getattr(a, f.name) for f in dataclasses.fields(a)]
    shared = sum(t.numel() * t.element_size() for t in tensors if t._base is None)
    return shared + sum(3 * size + 1 for size in sizes) * 4


@dataclasses.dataclass(slots=True)
class _Bucket:
    a: Activations            # views of the shared buffers' first `size` rows
    host: np.ndarray          # staging of a.inputs: ids (B), positions (B), slots (B), last (1)
    staged: torch.Tensor      # the same memory as a tensor (pinned on a GPU)
    graph: object = None      # the ts.Graph once captured


class PrefillGraphs:
    """`run(ids, slot, row)` -> (next token, its log-probability) of one prompt prefilled into
    cache slot `slot`, sampled with sampler row `row`; prompts up to `max_tokens`."""

    def __init__(self, model: Qwen3Model, dtype, device: str, max_tokens: int, use_graph: bool):
        self.model, self.dtype, self.device, self.use_graph = model, dtype, device, use_graph
        self.sizes = bucket_sizes(max_tokens)
        self.max_tokens = max_tokens
        self.buckets: dict[int, _Bucket] = {}
        self._shared: Activations | None = None   # the largest used bucket's buffers (_shared_buffers)
        self.cuda = str(device).startswith("cuda")
        self.out_token = torch.empty(1, dtype=torch.int32, pin_memory=self.cuda)
        self.out_chosen = torch.empty(1, dtype=torch.float32, pin_memory=self.cuda)
        self.in_flight = False    # a copy from a bucket's pinned staging may still be queued

    def bucket(self, n: int) -> int:
        """The smallest bucket holding n tokens."""
        return next(b for b in self.sizes if b >= n)

    def fits(self, n: int) -> bool:
        return 0 < n <= self.max_tokens

    def run(self, ids: list[int], slot: int, row: int) -> tuple[int, float]:
        """Prefill one prompt (positions 0 ..) into cache slot `slot`; its next token."""
        base = slot * self.model.cache.max_model_len
        return self.run_rows(ids, np.arange(base, base + len(ids), dtype=np.int32), row)

    def run_rows(self, ids: list[int], cache_rows, row: int) -> tuple[int, float]:
        """Prefill one prompt (positions 0 ..) whose token i goes to cache row cache_rows[i]
        (a paged cache's slot mapping: the serving engine); its next token."""
        n = len(ids)
        if not self.fits(n):
            raise ValueError(f"PrefillGraphs: {n} tokens, buckets hold 1 .. {self.max_tokens}")
        self._wait_staging()
        b = self._bucket(self.bucket(n))
        size = b.a.ids.shape[0]
        h = b.host                                         # (3 B + 1,): ids, positions (fixed), slots, last
        h[:n] = ids
        h[n:size] = 0
        h[2 * size:2 * size + n] = cache_rows
        h[2 * size + n:3 * size] = -1                       # padding rows write no key or value
        h[3 * size] = n - 1
        self._forward(b, b.staged)
        return self._sample(b, row)

    def warm_up(self, sizes: list[int] | None = None, tune: bool = False) -> None:
        """Run every bucket (or those of `sizes`) once and capture it: afterwards no prompt up
        to max_tokens compiles a kernel. The passes write nothing to the cache. The sampler
        runs at rows 0, 1 and 2: its row views' addresses fall in every 16-byte alignment
        class GPU code is specialized on (f32 and i64 rows: both aligned, neither, i64 only).
        `tune`: the eager passes run inside `tk.first_use_tuning()`, so each GEMM and attention
        shape of a bucket times the config model's best few configs and the capture keeps the
        fastest (a bucket captured before is captured again)."""
        self._wait_staging()
        for size in sorted(sizes or self.sizes, reverse=True):    # the largest first: it sizes the buffers
            b = self._bucket(size)
            h = b.host
            h[:size] = 0
            h[2 * size:3 * size] = -1
            h[3 * size] = 0
            if tune:
                b.graph = None
            with tk.first_use_tuning(tune):
                self._forward(b, b.staged)
        for row in range(min(3, self.model.sampler.max_rows)):
            self._sample(b, row)

    # -- internals ---------------------------------------------------------------------

    def _wait_staging(self) -> None:
        """Before the host rewrites a staging buffer: a run that raised before its sync may
        have left its copy from one queued (each run's sync clears in_flight)."""
        if self.in_flight:
            torch.cuda.synchronize(self.device)
            self.in_flight = False

    def _forward(self, b: _Bucket, staged: torch.Tensor) -> None:
        self.in_flight = self.cuda
        b.a.inputs.copy_(staged, non_blocking=self.cuda)   # host -> device, one copy
        if b.graph is not None:
            b.graph.replay()
            return
        self.model.prefill_paged(b.a, [0, b.a.ids.shape[0]], [0], None, sample=False)
        if self.use_graph:          # compiled by the eager pass: the capture records its launches
            try:
                with ts.graph() as g:
                    self.model.prefill_paged(b.a, [0, b.a.ids.shape[0]], [0], None, sample=False)
            except Exception as e:  # noqa: BLE001 - the eager pass above stands; later prompts run eagerly too
                self.use_graph = False
                warnings.warn(f"prefill graphs: the capture of the {b.a.ids.shape[0]}-token bucket failed "
                              f"({type(e).__name__}: {getattr(e, 'message', e)}); prefill runs eagerly from now on",
                              stacklevel=2)
                return
            b.graph = g

    def _sample(self, b: _Bucket, row: int) -> tuple[int, float]:
        a = b.a
        self.model.sampler(a.logits, a.tokens, a.chosen, first_row=row)
        if not self.cuda:
            return int(a.tokens[0]), float(a.chosen[0])
        self.out_token.copy_(a.tokens, non_blocking=True)       # device -> pinned host, one sync
        self.out_chosen.copy_(a.chosen, non_blocking=True)
        torch.cuda.current_stream(a.tokens.device).synchronize()
        self.in_flight = False
        return int(self.out_token[0]), float(self.out_chosen[0])

    def _bucket(self, size: int) -> _Bucket:
        b = self.buckets.get(size)
        if b is None:
            shared = self._shared_buffers(size)
            buf = torch.empty(3 * size + 1, dtype=torch.int32, device=self.device)
            # lens and tables are read only by decode rows, which a prefill from position 0 has
            # none of: they are views of positions and slots, not inputs of their own.
            rows = dict(residual=shared.residual, x=shared.x, h=shared.h, qkv=shared.qkv, qr=shared.qr,
                        kr=shared.kr, attn=shared.attn, gu=shared.gu, act=shared.act)
            a = dataclasses.replace(shared, inputs=buf, ids=buf[:size], positions=buf[size:2 * size],
                                    lens=buf[size:2 * size], slots=buf[2 * size:3 * size],
                                    tables=buf[2 * size:3 * size].view(size, 1), last=buf[3 * size:],
                                    **{k: t[:size] for k, t in rows.items()})
            staged = torch.empty(3 * size + 1, dtype=torch.int32, pin_memory=self.cuda)
            host = staged.numpy()
            host[size:2 * size] = np.arange(size, dtype=np.int32)   # positions: the row index, fixed
            b = self.buckets[size] = _Bucket(a, host, staged)
        return b

    def _shared_buffers(self, size: int) -> Activations:
        """Buffers of at least `size` rows. They grow to the largest bucket used so far (a
        server of short prompts never holds an 8192-row set); growing drops every bucket made
        over the old ones, each captured again at its next use."""
        if self._shared is None or self._shared.ids.shape[0] < size:
            self.buckets.clear()
            self._shared = None                     # the old buffers go with their graphs
            self._shared = Activations.allocate(self.model.cfg, size, 1, self.dtype, self.device)
        return self._shared
