"""Batched decode steps, each batch size captured once in `ts.graph()` and replayed.

A step's inputs — the new token, position, cache length, cache row and cache slot of each
sequence — are copied into the step's device buffer in one queued copy, and its tokens read
back with the step's one host sync (step_io); everything else is fixed
(weights, cache, buffers), so the first step of a batch size runs eagerly (compiling kernels, allocating the scratch
of split GEMMs and long softmax rows) and the second captures the same calls. Replays then
cost one launch. `ts.graph()` needs the Triton GPU backend: on the CPU every step is eager.
With `pdl` (default: TILESAFE_PDL when set, else DECODE_PDL) the graph's kernels use
programmatic dependent launch; the eager step before the capture runs under `ts.pdl()` so that
their PDL code is compiled then. PDL is what lets the GEMVs' weight prefetch (`ts.prefetch`,
matmul.GEMV_L2_PREFETCH) run while the kernel before them drains.

The serving engine's paged cache uses the same steps (`paged=`, `run_paged`): each row reads
its keys through its block table, and a batch of n requests runs in the smallest bucket of
1, 2, 4, ..., max_num_seqs that holds it (padding rows: step_io), so a handful of graphs
serve every batch size. Rows are independent (every kernel of the step computes a row from
that row alone), so padding changes no real row's tokens. `warm_up()` runs and captures
every bucket (greedy and sampled) before the first request, so serving compiles nothing.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

import tilesafe as ts

from .model import Activations, DecodeWorkspace, Qwen3Model
from .step_io import StepIO, paged_activations


# Decode graphs use PDL unless TILESAFE_PDL says otherwise: on the H200 it shortened the
# batch-1 step (0.6B 1.087 -> 1.009 ms, 4B 3.048 -> 3.028 ms, same tokens; s15 pdl_chain.py).
# A GPU without PDL (before Hopper, AMD) launches the same graph plainly.
DECODE_PDL = True


def bucket_sizes(max_num_seqs: int) -> list[int]:
    """Powers of two below max_num_seqs, then max_num_seqs itself."""
    sizes, b = [], 1
    while b < max_num_seqs:
        sizes.append(b)
        b *= 2
    return sizes + [max_num_seqs]


@dataclass(slots=True)
class _Step:
    a: Activations
    ws: DecodeWorkspace
    io: StepIO                # its inputs staged and sent, its tokens read back (one sync a step)
    graphs: dict = field(default_factory=dict)       # greedy -> the ts.Graph once captured
    eager_runs: dict = field(default_factory=dict)   # greedy -> eager steps run so far


class DecodeSteps:
    """`run(ids, positions, slots)` -> (next tokens, their log-probabilities); row i in cache
    slot slots[i] (default i), sampled with the sampler's row i.

    `paged=(max_blocks, max_num_seqs)`: the serving engine's steps over a paged cache,
    `run_paged(ids, positions, cache_rows, tables)`, each batch in its bucket (`pad=False`:
    at its exact size, the tests' reference)."""

    def __init__(self, model: Qwen3Model, dtype: torch.dtype, device: str, use_graph: bool, pdl: bool | None = None,
                 paged: tuple[int, int] | None = None, pad: bool = True):
        self.model, self.dtype, self.device, self.use_graph = model, dtype, device, use_graph
        if pdl is None:                                       # captured steps use programmatic dependent launch
            pdl = ts.settings.pdl if ts.settings.pdl_text else DECODE_PDL
        self.pdl = pdl
        self.steps: dict[int, _Step] = {}
        self.max_blocks = paged[0] if paged else None        # block table entries a row (None: the slot cache)
        self.sizes = bucket_sizes(paged[1]) if paged and pad else None

    def bucket(self, n: int) -> int:
        """The batch size a batch of n rows runs at."""
        return n if self.sizes is None else next(b for b in self.sizes if b >= n)

    def run(self, ids: list[int], positions: list[int],
            slots: list[int] | None = None) -> tuple[list[int], list[float]]:
        """Row i: token ids[i] at positions[i] of the sequence in cache slot slots[i] (default
        i), sampled with the sampler's row i. Any distinct slots: a batch holds only the
        sequences still running, wherever their slots are."""
        step = self._step(len(ids))
        slots = list(range(len(ids))) if slots is None else slots
        shift = self.model.vocab_start              # a tensor-parallel rank's first vocabulary row
        local_ids = [i - shift for i in ids] if shift else ids
        step.io.send(local_ids, positions, slots, self.model.cache.max_model_len)   # (5, B), one queued copy
        self._launch(step, len(ids))
        return step.io.receive()                    # the step's one host sync

    def run_paged(self, ids: list[int], positions: list[int], cache_rows: list[int],
                  tables: list[list[int]]) -> tuple[list[int], list[float]]:
        """Row i: token ids[i] at positions[i], its KV written at cache row cache_rows[i], its
        keys read through tables[i] (a live block list: step_io), sampled with the sampler's
        row i; the batch runs in its bucket, whose padding rows' sampler rows must be set
        (greedy: an all-greedy bucket takes the LM head's argmax). Returns the n real rows'
        tokens and log-probabilities."""
        return self.finish(self.start_paged(ids, positions, cache_rows, tables))

    def start_paged(self, ids: list[int], positions: list[int], cache_rows: list[int], tables: list[list[int]]):
        """`run_paged` without waiting: stage and launch the step; `finish(ticket)` waits and
        returns its tokens (the host may do other work while the device runs)."""
        step = self._step(self.bucket(len(ids)))
        step.io.send_paged(ids, positions, cache_rows, tables)
        self._launch(step, step.io.batch)
        return step, len(ids)

    def launch_ahead(self, ticket, cache_rows: list[int], tables: list[list[int]]):
        """Launch, before `finish(ticket)`, the next step of the started step's rows: real
        row i fed the token this step samples, at its next position, writing its KV at
        cache_rows[i] and reading through tables[i] (its live table, grown by at most the
        block that row holds). Returns that step's ticket; the host prepares and launches it
        while the device still runs this one (the serving engine's decode steps launched ahead)."""
        step, n = ticket
        step.io.send_ahead(n, cache_rows, tables)
        self._launch(step, step.io.batch)
        return step, n

    def finish(self, ticket) -> tuple[list[int], list[float]]:
        step, n = ticket
        return step.io.receive(n)

    def warm_up(self, greedy=(True, False)) -> None:
        """Run (compile) and capture every bucket's step before serving: all rows padding (no
        cache write), outputs dropped. The sampler's rows are whatever they hold."""
        for b in self.sizes or []:
            step = self._step(b)
            for g in greedy:
                if step.graphs.get(g) is None and not step.eager_runs.get(g):
                    self.run_padding(step, g)         # eager (compiles), then captured on a GPU

    def run_padding(self, step: _Step, greedy: bool) -> None:
        """One run of `step` (a bucket's) with all rows padding: no cache write, outputs dropped."""
        step.io.send_paged([], [], [], [])
        self._launch(step, step.io.batch, greedy)
        step.io.receive(0)

    def _launch(self, step: _Step, batch: int, greedy: bool | None = None) -> None:
        """The step's model call: replayed once captured, else eager (the first eager run of
        a graph-using step is followed by its capture)."""
        # An all-greedy batch takes its tokens from the LM head (linear_argmax), any other the
        # sampler: two different steps, each captured once.
        if greedy is None:
            greedy = self.model.sampler is not None and self.model.sampler.all_greedy(batch)
        a = step.a
        graph = step.graphs.get(greedy)
        if graph is not None:
            graph.replay()
        else:
            runs = step.eager_runs.get(greedy, 0)
            capture_next = self.use_graph and runs == 0
            with ts.pdl(self.pdl) if capture_next else contextlib.nullcontext():
                self.model.decode(a, step.ws, greedy)
            step.eager_runs[greedy] = runs + 1
            if capture_next:
                self._capture(step, greedy)

    def _step(self, batch: int) -> _Step:
        step = self.steps.get(batch)
        if step is None:
            cfg = self.model.cfg
            a = Activations.allocate(cfg, batch, batch, self.dtype, self.device)
            if self.max_blocks is not None:
                a = paged_activations(a, self.max_blocks)
            ws = self.model.decode_workspace(a)
            step = self.steps[batch] = _Step(a, ws, StepIO(a))
        return step

    def _capture(self, step: _Step, greedy: bool) -> None:
        """Capture the step just run eagerly (its kernels are compiled, its scratch exists);
        the capture records the launches without running them."""
        with ts.graph(pdl=self.pdl) as g:
            self.model.decode(step.a, step.ws, greedy)
        step.graphs[greedy] = g
