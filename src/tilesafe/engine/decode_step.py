"""Batched decode steps, each batch size captured once in `ts.graph()` and replayed.

A step's inputs — the new token, position, cache length, cache row and cache slot of each
sequence — are copied into the step's device buffer in one queued copy, and its tokens read
back with the step's one host sync (step_io); everything else is fixed
(weights, cache, buffers), so the first step of a batch size runs eagerly (compiling kernels, allocating the scratch
of split GEMMs and long softmax rows) and the second captures the same calls. Replays then
cost one launch. `ts.graph()` needs the Triton GPU backend: on the CPU every step is eager.
With `pdl` (default: TILESAFE_PDL) the graph's kernels use programmatic dependent launch; the
eager step before the capture runs under `ts.pdl()` so that their PDL code is compiled then.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

import tilesafe as ts

from .model import Activations, DecodeWorkspace, Qwen3Model
from .step_io import StepIO


@dataclass(slots=True)
class _Step:
    a: Activations
    ws: DecodeWorkspace
    io: StepIO                # its inputs staged and sent, its tokens read back (one sync a step)
    graphs: dict = field(default_factory=dict)       # greedy -> the ts.Graph once captured
    eager_runs: dict = field(default_factory=dict)   # greedy -> eager steps run so far


class DecodeSteps:
    """`run(ids, positions, slots)` -> (next tokens, their log-probabilities); row i in cache
    slot slots[i] (default i), sampled with the sampler's row i."""

    def __init__(self, model: Qwen3Model, dtype: torch.dtype, device: str, use_graph: bool, pdl: bool | None = None):
        self.model, self.dtype, self.device, self.use_graph = model, dtype, device, use_graph
        self.pdl = ts.settings.pdl if pdl is None else pdl   # captured steps use programmatic dependent launch
        self.steps: dict[int, _Step] = {}

    def run(self, ids: list[int], positions: list[int],
            slots: list[int] | None = None) -> tuple[list[int], list[float]]:
        """Row i: token ids[i] at positions[i] of the sequence in cache slot slots[i] (default
        i), sampled with the sampler's row i. Any distinct slots: a batch holds only the
        sequences still running, wherever their slots are."""
        step = self._step(len(ids))
        a = step.a
        slots = list(range(len(ids))) if slots is None else slots
        shift = self.model.vocab_start              # a tensor-parallel rank's first vocabulary row
        local_ids = [i - shift for i in ids] if shift else ids
        step.io.send(local_ids, positions, slots, self.model.cache.max_model_len)   # (5, B), one queued copy
        # An all-greedy batch takes its tokens from the LM head (linear_argmax), any other the
        # sampler: two different steps, each captured once.
        greedy = self.model.sampler is not None and self.model.sampler.all_greedy(len(ids))
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
        return step.io.receive()                    # the step's one host sync

    def _step(self, batch: int) -> _Step:
        step = self.steps.get(batch)
        if step is None:
            cfg = self.model.cfg
            a = Activations.allocate(cfg, batch, batch, self.dtype, self.device)
            ws = self.model.decode_workspace(a)
            step = self.steps[batch] = _Step(a, ws, StepIO(a))
        return step

    def _capture(self, step: _Step, greedy: bool) -> None:
        """Capture the step just run eagerly (its kernels are compiled, its scratch exists);
        the capture records the launches without running them."""
        with ts.graph(pdl=self.pdl) as g:
            self.model.decode(step.a, step.ws, greedy)
        step.graphs[greedy] = g
