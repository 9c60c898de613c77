"""`Sampler`: the engine's sampling parameters on the device, one row per sequence, and the
call that samples the next tokens with them (`tilesafe.kernels.sample`).

    sampler = Sampler(max_num_seqs, device)
    seeds = [sampler.seed_for(p) for p in params]        # once per request, kept with it
    sampler.set_rows(params, seeds)                      # when a wave of sequences starts
    sampler.set_steps(steps)                             # before each step: tokens generated so far
    sampler(logits, out_tokens, out_logprobs)            # (B, V) -> (B,) i32, (B,) f32 on the device
    sampler(prompt_logits, tok, lp, first_row=slot)      # a prefill's one row, with its sequence's row

Row i of `logits` is sampled with row i's parameters. The random number of a row is
Philox(seed, step), so a request with a seed gets the same tokens whatever else is in the
batch and whichever row it sits in; a request without one gets a seed drawn once on the
host. The parameter tensors are allocated once and updated in place (host-to-device copies,
a few bytes per row), so a decode step that calls the sampler can be captured in a CUDA
graph: a replay reads the values copied in before it. Nothing is copied back to the host.

As in vLLM, temperatures below 1e-5 and top_k == 1 mean greedy (the first maximum), top_k
0 or -1 means no top-k, top_p 1 no top-p; the log-probability is that of the raw logits.
"""
from __future__ import annotations

import random

import torch

import tilesafe.kernels as tk
from tilesafe.kernels.sampling import TEMPERATURE_MAX

from .sampling_params import SamplingParams

GREEDY_BELOW = 1e-5      # vLLM's sampling epsilon: a smaller temperature samples greedily
# The device's f32 rows hold what Python's ints and floats may exceed: a top_k of 2**31 or more
# (no limit: no vocabulary is that large) is 2**31 - 1, and a temperature above 1e30, whose
# f32 could be inf (1e300) or a reciprocal flushed to 0, is 1e30. Both are exact: exp((x - max)
# / 1e30) is 1.0 in f32 for any logit gap below 1e22, the same uniform weights a larger
# temperature gives.
TOP_K_MAX = 2 ** 31 - 1


class Sampler:
    def __init__(self, max_num_seqs: int, device, rng: random.Random | None = None):
        def rows(dtype, value):
            return torch.full((max_num_seqs,), value, dtype=dtype, device=device)
        self.temperature = rows(torch.float32, 0.0)       # (S,) 0: greedy
        self.top_k = rows(torch.int32, 0)                  # (S,) 0: off
        self.top_p = rows(torch.float32, 1.0)              # (S,) 1: off
        self.seed = rows(torch.int64, 0)                   # (S,)
        self.step = rows(torch.int32, 0)                   # (S,) tokens the row's sequence has generated
        self.greedy = [False] * max_num_seqs               # host copy: which rows sample greedily
        self.rng = rng or random.Random()

    @property
    def max_rows(self) -> int:
        return self.temperature.shape[0]

    def seed_for(self, params: SamplingParams) -> int:
        """The request's seed, or a fresh one for a request without: keep it with the request."""
        return params.seed if params.seed is not None else self.rng.getrandbits(63)

    def set_rows(self, params: list[SamplingParams], seeds: list[int]) -> None:
        """Rows 0.. take these (resolved) parameters and seeds."""
        n = self._rows(len(params))
        greedy = [p.temperature < GREEDY_BELOW or p.top_k == 1 for p in params]
        self.greedy[:n] = greedy
        self.temperature[:n].copy_(torch.tensor([0.0 if g else min(p.temperature, TEMPERATURE_MAX)
                                                 for p, g in zip(params, greedy)], dtype=torch.float32))
        self.top_k[:n].copy_(torch.tensor([min(max(p.top_k, 0), TOP_K_MAX) for p in params], dtype=torch.int32))
        self.top_p[:n].copy_(torch.tensor([p.top_p for p in params], dtype=torch.float32))
        self.seed[:n].copy_(torch.tensor([_signed64(s) for s in seeds], dtype=torch.int64))

    def all_greedy(self, n: int) -> bool:
        """Whether rows 0 .. n-1 all sample greedily (their token is the argmax of the logits)."""
        return all(self.greedy[:self._rows(n)])

    def set_steps(self, steps: list[int]) -> None:
        """Row i draws the random number of its sequence's token number steps[i]."""
        n = self._rows(len(steps))
        self.step[:n].copy_(torch.tensor(steps, dtype=torch.int32))

    def __call__(self, logits: torch.Tensor, out_tokens: torch.Tensor, out_logprobs: torch.Tensor,
                 first_row: int = 0) -> None:
        """Sample a token for each row of logits (B, V) into out_tokens (B,) i32 and its
        log-probability into out_logprobs (B,) f32, with the parameters of rows first_row ..
        first_row + B - 1 (a prompt's prefill samples its one row with its sequence's row)."""
        r = slice(first_row, first_row + logits.shape[0])
        self._rows(r.stop)
        tk.sample(logits, self.temperature[r], self.top_k[r], self.top_p[r], self.seed[r], self.step[r],
                  out=out_tokens, logprobs_out=out_logprobs)

    def _rows(self, n: int) -> int:
        if n > self.max_rows:
            raise ValueError(f"Sampler: {n} rows, but it was made for {self.max_rows} (max_num_seqs)")
        return n


def _signed64(seed: int) -> int:
    """Any Python int as the i64 with its low 64 bits (Philox reads a seed's low 64 bits)."""
    seed &= (1 << 64) - 1
    return seed - (1 << 64) if seed >= 1 << 63 else seed
