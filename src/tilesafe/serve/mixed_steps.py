"""Captured mixed steps: fresh prompts and the running requests' decode rows in one forward,
replayed from a CUDA graph.

A step whose prefill chunks all start their prompt (nothing cached) has a structure fixed
by two numbers, C chunks and T = token_bucket(longest chunk) rows each: chunk j is rows
j T .. j T + T - 1 (its tokens, then padding at the positions after it, writing nothing),
the decode rows follow as one-token chunks, one-token padding chunks fill the sampled rows
up to R = max_num_seqs (position 1, a table of zeros, cache row -1), and rows in no chunk
fill the forward up to its row bucket (prefill_pack). The chunks' attention is flash over
their own keys (shapes only), the R - C one-token rows attend in one paged decode
attention whose lengths are read on the device. Everything that changes between steps —
tokens, positions, cache rows, each chunk's last row, the block tables, the decode rows'
lengths — is data in one input buffer, staged on the host (pinned) and copied in before
the step. So one graph per (C, T) serves every such step (C up to a few; the graphs share
one set of activation buffers, each its first rows): the weights are read once for
the prompts and the decodes together, and the host cost is one replay instead of an eager
forward (tens of ms at 4B). Steps with R - C = 1 (that one row would take the prefill
kernel, with its start baked into the graph) and steps with a cached prefix run otherwise.
The first step of a (C, T) runs eagerly (compiling what warm-up did not), the second is
captured; without graphs (the CPU) every step runs the same buffers eagerly.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

import tilesafe as ts
import tilesafe.kernels as tk

from ..engine.model import Activations, Qwen3Model
from .prefill_pack import rows_bucket, token_bucket


@dataclasses.dataclass(slots=True)
class _Step:
    a: Activations
    starts: list[int]
    cached: list[int]
    tables: torch.Tensor         # (R, W) views of the input buffer
    lens: torch.Tensor           # (R - C,)
    workspace: object            # the decode rows' attention scratch
    staged: torch.Tensor         # the input buffer's host copy (pinned on a GPU)
    host: np.ndarray             # the same memory
    graph: object = None
    eager_runs: int = 0


class MixedSteps:
    def __init__(self, model: Qwen3Model, dtype, device: str, seqs: int, width: int, use_graph: bool,
                 max_chunks: int, max_tokens: int):
        self.model, self.dtype, self.device, self.use_graph = model, dtype, device, use_graph
        self.seqs, self.width = seqs, width                # R, block table entries
        self.max_chunks = min(max_chunks, seqs)            # C; a step with more runs otherwise
        self.max_rows = rows_bucket(self.max_chunks * token_bucket(max_tokens) + seqs)
        self.cuda = str(device).startswith("cuda")
        self.steps: dict[tuple[int, int], _Step] = {}
        self._shared: Activations | None = None            # the big buffers, max_rows of them; a step views its first

    def fits(self, chunks: int) -> bool:
        """Whether a step of this many fresh chunks has a captured form (at most max_chunks,
        and R - C != 1)."""
        return 0 < chunks <= self.max_chunks and self.seqs - chunks != 1

    def run(self, prefill, decode, blocks, while_running=None) -> tuple[list[int], list[float]]:
        """Prefill each (request, n) of `prefill` (n tokens from position 0) and decode each
        request of `decode`; the sampled tokens and log-probabilities, chunks first. The
        sampler's rows must be set: chunks, then decode rows, then idle rows up to R.
        `while_running` is called between the launch and the wait (the host's other work
        overlaps the step on a GPU); if it raises, the step is waited for before the error goes on."""
        c, t = len(prefill), token_bucket(max(n for _, n in prefill))
        step = self._step(c, t)
        self._stage(step, c, t, prefill, decode, blocks)
        self._launch(step)
        if while_running is not None:
            try:
                while_running()
            except BaseException:
                step.a.tokens[:1].tolist()      # the step's sync first: only then may its staging buffer be
                raise                           # rewritten (by the next step of its shape, after the failure)
        n = c + len(decode)
        return step.a.tokens[:n].tolist(), step.a.chosen[:n].tolist()     # the step's host sync

    def warm_up(self, largest: int, chunks: int | None = None) -> None:
        """Run (and on a GPU capture) the steps of 1 .. `chunks` (default max_chunks) chunks of
        every token bucket up to `largest`, all rows padding: nothing is written to the cache."""
        t = token_bucket(1)
        while t <= largest:
            for c in range(1, min(chunks or self.max_chunks, self.max_chunks) + 1):
                if self.fits(c):
                    step = self._step(c, t)
                    if step.graph is None and not step.eager_runs:
                        self._stage(step, c, t, [], [], None)
                        self._launch(step)
            t *= 2

    def _stage(self, step: _Step, c: int, t: int, prefill, decode, blocks) -> None:
        """Write the step's inputs into its staging buffer and queue their copy."""
        m, r, w = step.a.ids.shape[0], self.seqs, self.width
        h = step.host
        ids, pos, slots = h[:m], h[m:2 * m], h[2 * m:3 * m]
        last = h[3 * m:3 * m + r]
        tables = h[3 * m + r:3 * m + r + r * w].reshape(r, w)
        lens = h[3 * m + r + r * w:]
        ids[:] = 0
        pos[:] = 0
        slots[:] = -1
        tables[:] = 0
        for j in range(c):                                 # chunk j: rows j t .., positions 0 .. t - 1
            pos[j * t:(j + 1) * t] = np.arange(t, dtype=np.int32)
            last[j] = j * t
        for j, (req, n) in enumerate(prefill):
            s = j * t
            ids[s:s + n] = (req.seq.prompt_ids + req.seq.tokens)[:n]
            slots[s:s + n] = blocks.slots(req.request_id, 0, n)
            slots[s:s + min(req.cached, n)] = -1           # a prefix-cache hit recomputed: its blocks are shared
            last[j] = s + n - 1
        base = c * t
        pos[base:base + r - c] = 1                         # padding chunks: one token after one
        lens[:] = 2
        last[c:] = np.arange(base, base + r - c, dtype=np.int32)
        for i, req in enumerate(decode):
            bs = blocks.block_size
            p = req.computed
            table = blocks.live_table(req.request_id)
            toks = req.seq.tokens
            ids[base + i] = toks[-1] if toks else req.seq.prompt_ids[-1]
            pos[base + i] = p
            slots[base + i] = table[p // bs] * bs + p % bs
            tables[c + i, :len(table)] = table
            lens[i] = p + 1
        step.a.inputs.copy_(step.staged, non_blocking=self.cuda)   # rewritten only after the step's sync

    def _launch(self, step: _Step) -> None:
        if step.graph is not None:
            step.graph.replay()
            return
        self._forward(step)
        step.eager_runs += 1
        if self.use_graph and step.eager_runs == 1:   # compiled and its scratch made: the capture records
            with ts.graph() as g:
                self._forward(step)
            step.graph = g

    def _forward(self, step: _Step) -> None:
        self.model.prefill_paged(step.a, step.starts, step.cached, step.tables, lens=step.lens,
                                 workspace=step.workspace)

    def _step(self, c: int, t: int) -> _Step:
        step = self.steps.get((c, t))
        if step is None:
            r, w = self.seqs, self.width
            m = rows_bucket(c * t + r - c)
            shared = self._shared_buffers()
            size = 3 * m + r + r * w + (r - c)
            buf = torch.zeros(size, dtype=torch.int32, device=self.device)
            rows = {k: getattr(shared, k)[:m] for k in ("residual", "x", "h", "qkv", "qr", "kr", "attn", "gu", "act")}
            a = dataclasses.replace(shared, inputs=buf, ids=buf[:m], positions=buf[m:2 * m], slots=buf[2 * m:3 * m],
                                    last=buf[3 * m:3 * m + r], **rows)
            tables = buf[3 * m + r:3 * m + r + r * w].view(r, w)
            lens = buf[3 * m + r + r * w:]
            workspace = tk.paged_decode_workspace(a.qr[c * t:c * t + r - c], self.model.cache.k[0],
                                                  max_len=w * self.model.cache.k[0].shape[1]) if r - c > 1 else None
            staged = torch.zeros(size, dtype=torch.int32, pin_memory=self.cuda)
            starts = [j * t for j in range(c + 1)] + [c * t + i for i in range(1, r - c + 1)]
            step = self.steps[(c, t)] = _Step(a, starts, [0] * c + [1] * (r - c), tables, lens, workspace, staged,
                                              staged.numpy())
        return step

    def _shared_buffers(self) -> Activations:
        if self._shared is None:
            self._shared = Activations.allocate(self.model.cfg, self.max_rows, self.seqs, self.dtype, self.device)
            self._shared.attn.zero_()                       # rows in no chunk are never attended: zeros
        return self._shared
