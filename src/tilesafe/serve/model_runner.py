"""Runs the engine's Qwen3 model for the scheduler: prefills of newly admitted requests
into their cache slots, and batched decode steps over the running ones.

A request keeps the cache slot the scheduler gave it for as long as it runs. A decode step's
rows are the running requests in slot order, each reading and writing its own slot
(`DecodeSteps.run(ids, positions, slots)`: no idle rows; one step per batch size, captured
on a GPU), sampled with the sampler's row of the same index — so the sampler's rows are
rewritten whenever the batch's requests change. A prefill runs the prompts of consecutive
slots packed together through a view of the model whose cache starts at the first of those
slots and whose sampler reads from that row (the sampler's rows are then indexed by slot).
"""
from __future__ import annotations

import torch

from ..engine.kv_cache import KVCache
from ..engine.model import Activations, Qwen3Model
from ..engine.sampling_params import SamplingParams
from .request import Request


class ModelRunner:
    def __init__(self, llm):
        self.llm = llm
        n = llm.max_num_seqs
        idle = SamplingParams(temperature=0).resolved({})
        self._params: list[SamplingParams] = [idle] * n      # each slot's sampling row
        self._seeds: list[int] = [0] * n
        self._steps: list[int] = [0] * n                     # each slot's Philox step: tokens generated
        self._rows: tuple | None = None                      # the requests the sampler's rows hold, by row

    def prefill(self, reqs: list[Request]) -> None:
        """Compute each request's KV (prompt, then tokens generated before a preemption) into
        its slot and append the token sampled after it."""
        for r in reqs:
            self._params[r.slot], self._seeds[r.slot] = r.seq.params, r.seq.seed
            self._steps[r.slot] = len(r.seq.tokens)
        self.llm.sampler.set_rows(self._params, self._seeds)
        self.llm.sampler.set_steps(self._steps)
        self._rows = None                                    # rows by slot now, not by batch row
        for run in _consecutive(sorted(reqs, key=lambda r: r.slot)):
            self._prefill_run(run)

    def decode(self, reqs: list[Request]) -> None:
        """One token for each request (each feeds back its last token), row i the i-th by slot."""
        reqs = sorted(reqs, key=lambda r: r.slot)
        sampler = self.llm.sampler
        if self._rows != tuple(reqs):
            sampler.set_rows([r.seq.params for r in reqs], [r.seq.seed for r in reqs])
            self._rows = tuple(reqs)
        sampler.set_steps([len(r.seq.tokens) for r in reqs])              # each row's Philox step
        tokens, logprobs = self.llm.decode_steps.run([r.seq.tokens[-1] for r in reqs],
                                                     [r.seq.position for r in reqs], [r.slot for r in reqs])
        for r, t, lp in zip(reqs, tokens, logprobs):
            r.seq.append(t, lp)

    def _prefill_run(self, run: list[Request]) -> None:
        llm, first = self.llm, run[0].slot
        ids = [r.kv_tokens for r in run]
        lengths = [len(x) for x in ids]
        starts = [sum(lengths[:i]) for i in range(len(run) + 1)]
        a = Activations.allocate(llm.config, starts[-1], len(run), llm.dtype, llm.device)
        a.ids.copy_(torch.tensor([t for x in ids for t in x], dtype=torch.int32))
        a.positions.copy_(torch.cat([torch.arange(n, dtype=torch.int32) for n in lengths]))
        a.last.copy_(torch.tensor(starts[1:], dtype=torch.int32) - 1)
        cache = llm.model.cache
        view = KVCache([k[first:first + len(run)] for k in cache.k], [v[first:first + len(run)] for v in cache.v],
                       len(run), cache.max_model_len)
        model = Qwen3Model(llm.config, llm.model.w, view, _SamplerRows(llm.sampler, first))
        model.prefill(a, starts)
        for r, t, lp in zip(run, a.tokens.tolist(), a.chosen.tolist()):
            r.seq.append(t, lp)


class _SamplerRows:
    """The engine's sampler, seen from row `first` on: a prefill of slots first.. samples
    its prompts with their own rows."""

    def __init__(self, sampler, first: int):
        self.sampler, self.first = sampler, first

    def __call__(self, logits, out_tokens, out_logprobs):
        self.sampler(logits, out_tokens, out_logprobs, first_row=self.first)


def _consecutive(reqs: list[Request]) -> list[list[Request]]:
    """Requests sorted by slot, split into runs of consecutive slots."""
    runs: list[list[Request]] = []
    for r in reqs:
        if runs and runs[-1][-1].slot + 1 == r.slot:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs
