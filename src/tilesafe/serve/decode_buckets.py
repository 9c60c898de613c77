"""Batched decode steps over the paged KV cache, one per batch-size bucket (1, 2, 4, 8, ...,
max_num_seqs), each captured once in `ts.graph()` on a GPU and replayed.

A batch of n running requests runs in the smallest bucket B >= n: rows n .. B-1 are
padding — token 0 at position 0, a cache length of 1, slot -1 (the KV write skips it) and
a block table of zeros (its attention reads block 0's first row: finite, never written) —
and their sampled tokens are dropped. Each row's inputs (token, position, length, slot,
block table) reach the device in one copy into the bucket's buffer, so the captured step
replays for any requests, positions and tables: a few graphs serve every batch size, where
one per exact size would capture up to max_num_seqs of them. Rows are independent (every
kernel of the step computes a row from that row alone), so padding changes no real row's
tokens. `pad=False` runs each batch at its exact size (the test's reference).
"""
from __future__ import annotations

import dataclasses

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
        pad = b - n
        rows = [*ids, *[0] * pad, *positions, *[0] * pad, *[p + 1 for p in positions], *[1] * pad,
                *slots, *[-1] * pad]
        for t in tables:
            rows += t + [0] * (self.max_blocks - len(t))
        rows += [0] * (pad * self.max_blocks)
        step.a.inputs.copy_(torch.tensor(rows, dtype=torch.int32))            # host -> device, one copy
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
            step = self.steps[b] = _Step(a, self.model.decode_workspace(a))
        return step
