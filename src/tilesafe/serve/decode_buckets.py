"""Batched decode steps over the paged KV cache, one per batch-size bucket (1, 2, 4, 8, ...,
max_num_seqs), each captured once in `ts.graph()` on a GPU and replayed.

A batch of n running requests runs in the smallest bucket B >= n: rows n .. B-1 are
padding — token 0 at position 0, a cache length of 1, slot -1 (the KV write skips it) and
a block table of zeros (its attention reads block 0's first row: finite, the cache starts
zeroed) —
and their sampled tokens are dropped. Each row's inputs (token, position, length, slot,
block table) reach the device in one copy into the bucket's buffer, so the captured step
replays for any requests, positions and tables: a few graphs serve every batch size, where
one per exact size would capture up to max_num_seqs of them. Rows are independent (every
kernel of the step computes a row from that row alone), so padding changes no real row's
tokens. `pad=False` runs each batch at its exact size (the test's reference).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

import tilesafe as ts

from ..engine.model import Activations, Qwen3Model


def bucket_sizes(max_num_seqs: int) -> list[int]:
    """Powers of two below max_num_seqs, then max_num_seqs itself."""
    sizes, b = [], 1
    while b < max_num_seqs:
        sizes.append(b)
        b *= 2
    return sizes + [max_num_seqs]


@dataclasses.dataclass(slots=True)
class _Step:
    a: Activations
    ws: object
    host: np.ndarray          # the inputs' staging copy on the host
    graph: object = None      # the ts.Graph once captured
    eager_runs: int = 0


class DecodeBuckets:
    """`run(ids, positions, slots, tables)` -> (next tokens, their log-probabilities) of the
    n real rows; the sampler's rows 0 .. bucket(n) - 1 must be set (padding rows too)."""

    def __init__(self, model: Qwen3Model, max_num_seqs: int, max_blocks: int, dtype, device: str,
                 use_graph: bool, pad: bool = True):
        self.model, self.dtype, self.device, self.use_graph = model, dtype, device, use_graph
        self.max_blocks = max_blocks
        self.sizes = bucket_sizes(max_num_seqs) if pad else None
        self.steps: dict[int, _Step] = {}

    def bucket(self, n: int) -> int:
        return n if self.sizes is None else next(b for b in self.sizes if b >= n)

    def run(self, ids: list[int], positions: list[int], slots: list[int],
            tables: list[list[int]]) -> tuple[list[int], list[float]]:
        n = len(ids)
        b = self.bucket(n)
        step = self._step(b)
        host = step.host                                  # (4 + max_blocks, b) seen as the device buffer's layout
        host[:4 * b] = 0
        host[:n], host[b:b + n], host[3 * b:3 * b + n] = ids, positions, slots
        host[2 * b:2 * b + n] = host[b:b + n] + 1         # each row's cache length after this token
        host[2 * b + n:3 * b], host[3 * b + n:4 * b] = 1, -1                  # padding rows: length 1, no write
        t = host[4 * b:].reshape(b, self.max_blocks)
        t[:] = 0
        for i, row in enumerate(tables):
            t[i, :len(row)] = row
        step.a.inputs.copy_(torch.from_numpy(host))      # host -> device, one copy
        if step.graph is not None:
            step.graph.replay()
        else:
            self.model.decode(step.a, step.ws)
            step.eager_runs += 1
            if self.use_graph and step.eager_runs == 1:
                with ts.graph() as g:         # compiled and allocated by the eager run: the capture records
                    self.model.decode(step.a, step.ws)
                step.graph = g
        return step.a.tokens[:n].tolist(), step.a.chosen[:n].tolist()          # device -> host copies only

    def _step(self, b: int) -> _Step:
        step = self.steps.get(b)
        if step is None:
            a = Activations.allocate(self.model.cfg, b, b, self.dtype, self.device)
            # One int32 buffer: ids, positions, lengths, slots (b each), then the (b, max_blocks) tables.
            buf = torch.zeros(b * (4 + self.max_blocks), dtype=torch.int32, device=self.device)
            a = dataclasses.replace(a, inputs=buf, ids=buf[:b], positions=buf[b:2 * b], lens=buf[2 * b:3 * b],
                                    slots=buf[3 * b:4 * b], tables=buf[4 * b:].view(b, self.max_blocks))
            host = np.zeros(buf.shape[0], dtype=np.int32)
            step = self.steps[b] = _Step(a, self.model.decode_workspace(a), host)
        return step
