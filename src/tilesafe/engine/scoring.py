"""Teacher-forced scoring (`LLM.score`): what the model predicts at each position of a given
continuation, the continuation fed in whatever the model would have picked.

    s = llm.score(prompt_ids, continuation_ids)                  # one prefill pass
    s.logits             # (T, V) float32 on the host: row i predicts continuation[i]
                         # from prompt + continuation[:i]
    s.logprobs           # [T] the log-probability of each continuation token
    s.greedy             # [T] each row's most likely token; s.greedy_logprobs its log-probability
    s = llm.score(prompt_ids, continuation_ids, through="decode")
    s.greedy             # the same rows through the engine's decode steps (the captured graph
                         # on a GPU): the prompt prefilled, then continuation[i] fed at each step

`through="prefill"` runs prompt + continuation[:-1] as one eager prefill into cache slot 0 and
keeps the logits of the continuation's rows; log-probabilities and argmaxes are taken on the
host, so no torch kernel runs on the device. `through="decode"` runs what `generate` runs
(prefill, then one decode step per token, greedy: the LM head's argmax, no logits written), so
only `greedy` and `greedy_logprobs` are known there. The requests are checked before any
device work, and a refused call leaves the LLM as it was. Benchmarks use both to compare the
engine with other implementations of the model (`benchmarks/engine_check.py`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import request_error
from .model import Activations
from .sampling_params import SamplingParams

PATHS = ("prefill", "decode")


@dataclass(slots=True)
class Score:
    continuation: list[int]
    greedy: list[int]                        # row i's most likely token
    greedy_logprobs: list[float]             # its log-probability
    logits: torch.Tensor | None = None       # (T, V) float32 on the host (through="prefill")
    logprobs: list[float] | None = None      # each continuation token's log-probability (through="prefill")


def check(llm, prompt, continuation, through) -> tuple[list[int], list[int]]:
    """The request as lists of ints, or a RequestError naming the argument, limit and value."""
    if through not in PATHS:
        raise request_error(f"score: through must be 'prefill' or 'decode', got {through!r}",
                            help="'prefill' gives the logits; 'decode' runs the steps generate runs")
    if through == "prefill" and llm._tp is not None:
        raise request_error("score: through='prefill' does not run with tensor parallelism",
                            help="use through='decode', or an LLM on one GPU")
    ids = []
    for name, seq in (("prompt_ids", prompt), ("continuation_ids", continuation)):
        if not isinstance(seq, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in seq):
            raise request_error(f"score: {name} must be a list of ints, got {type(seq).__name__}",
                                help="pass token ids, e.g. llm.get_tokenizer().encode(text)")
        if not seq:
            raise request_error(f"score: {name} is empty (0 tokens)", help="give it at least one token")
        bad = next((t for t in seq if not 0 <= t < llm.config.vocab_size), None)
        if bad is not None:
            raise request_error(f"score: {name} holds token id {bad}, outside the vocabulary "
                                f"[0, {llm.config.vocab_size})",
                                help="encode the text with this model's tokenizer (llm.get_tokenizer())")
        ids.append(list(seq))
    total = len(ids[0]) + len(ids[1])
    if total > llm.max_model_len:
        raise request_error(f"score: prompt_ids ({len(ids[0])}) and continuation_ids ({len(ids[1])}) hold {total} "
                            f"tokens, but max_model_len is {llm.max_model_len}",
                            help="shorten them or raise max_model_len")
    return ids[0], ids[1]


def through_prefill(llm, prompt: list[int], continuation: list[int]) -> Score:
    """One eager prefill of prompt + continuation[:-1] into cache slot 0, keeping the logits
    of the rows that predict the continuation (the last prompt row onwards)."""
    model, seq = llm.model, prompt + continuation[:-1]
    t, p, n = len(seq), len(prompt), len(continuation)
    a = Activations.allocate(model.cfg, t, n, llm.dtype, llm.device)
    a.ids.copy_(torch.tensor(seq, dtype=torch.int32))                           # host -> device
    a.positions.copy_(torch.arange(t, dtype=torch.int32))
    a.last.copy_(torch.arange(p - 1, t, dtype=torch.int32))
    model.prefill(a, [0, t], sample=False)                                      # into cache slot 0
    logits = a.logits.cpu().float()                                             # (T, V), on the host
    logprobs = torch.log_softmax(logits.double(), -1)
    greedy = logits.argmax(-1)
    rows = torch.arange(n)
    return Score(continuation, greedy.tolist(), logprobs[rows, greedy].tolist(), logits,
                 logprobs[rows, torch.tensor(continuation)].tolist())


def through_decode(llm, prompt: list[int], continuation: list[int], prefill, decode) -> Score:
    """The prompt's prefill, then continuation[i] fed through one decode step each (cache slot
    0, sampler row 0, greedy), as `generate` runs them: `prefill(prompts)` and `decode(ids,
    positions, slots)` are the LLM's steps (LLM._prefill_ids, LLM._decode)."""
    greedy = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True).resolved(
        llm.generation_config.sampling_defaults())
    llm.sampler.set_rows([greedy], [0])
    llm.sampler.set_steps([0])
    first, first_lp = prefill([prompt])
    tokens, logprobs = [first[0]], [first_lp[0]]
    for i, tok in enumerate(continuation[:-1]):
        t, lp = decode([tok], [len(prompt) + i], [0])
        tokens.append(t[0])
        logprobs.append(lp[0])
    return Score(continuation, tokens, logprobs)
