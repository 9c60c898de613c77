"""`SamplingParams`: how one request is decoded, with vLLM's names and defaults.

Values are checked when the object is made, before any GPU work: a bad one is a
`RequestError` that names the parameter, the allowed range and the value. Parameters left
unset (None) take the checkpoint's `generation_config.json` value, then vLLM's default
(`resolved`).

vLLM's other sampling knobs (`min_p`, `repetition_penalty`, `n`, ...: `NOT_APPLIED`) are
fields too, so code written for vLLM runs unchanged where it sets them to their neutral value;
any other value is refused, naming the field and the value, rather than silently ignored.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .errors import request_error

DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 16}
# vLLM's sampling parameters the sampler does not implement: each one's neutral value (None is
# neutral too: vLLM's "unset") and what to use instead. Anything else would be a request
# decoded differently from what it asked, with no sign of it.
NOT_APPLIED = {
    "n": (1, "call generate once per completion, each with its own seed"),
    "best_of": (1, "call generate once per candidate and keep the best"),
    "min_p": (0.0, "trim unlikely tokens with top_p or top_k instead"),
    "repetition_penalty": (1.0, "leave it unset: the sampler applies temperature, top_k and top_p only"),
    "presence_penalty": (0.0, "leave it unset: the sampler applies temperature, top_k and top_p only"),
    "frequency_penalty": (0.0, "leave it unset: the sampler applies temperature, top_k and top_p only"),
    "min_tokens": (0, "generate a fixed length with ignore_eos=True and max_tokens"),
    "logit_bias": ({}, "leave it unset: the sampler applies temperature, top_k and top_p only"),
    "allowed_token_ids": (None, "leave it unset: every token of the vocabulary can be sampled"),
    "bad_words": ([], "leave it unset: the sampler applies temperature, top_k and top_p only"),
    "logits_processors": ([], "leave it unset: the logits stay on the device, no host code sees them"),
    "prompt_logprobs": (None, "score the prompt with llm.score(prompt_ids, continuation_ids)"),
    "include_stop_str_in_output": (False, "add the stop string to the text yourself (stop_reason names it)"),
}
# What each sampling value must be (a test, its wording): generation_config.json's values are
# checked against the same ranges when the file is read.
RANGES = {"temperature": (lambda v: v >= 0, ">= 0"), "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
          "top_k": (lambda v: v >= -1, ">= -1 (0 or -1: no limit)"), "max_tokens": (lambda v: v > 0, "> 0")}


@dataclass(slots=True)
class SamplingParams:
    temperature: float | None = None      # 0: greedy
    top_p: float | None = None            # in (0, 1]
    top_k: int | None = None              # 0 or -1: all tokens
    max_tokens: int | None = None         # generated tokens at most (the model length also bounds them)
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None           # 1: the chosen token's log-probability per generated token
    skip_special_tokens: bool = True
    # vLLM's knobs the sampler does not implement (NOT_APPLIED): only their neutral value is taken.
    n: int | None = field(default=None, repr=False)
    best_of: int | None = field(default=None, repr=False)
    min_p: float | None = field(default=None, repr=False)
    repetition_penalty: float | None = field(default=None, repr=False)
    presence_penalty: float | None = field(default=None, repr=False)
    frequency_penalty: float | None = field(default=None, repr=False)
    min_tokens: int | None = field(default=None, repr=False)
    logit_bias: dict | None = field(default=None, repr=False)
    allowed_token_ids: list | None = field(default=None, repr=False)
    bad_words: list | None = field(default=None, repr=False)
    logits_processors: list | None = field(default=None, repr=False)
    prompt_logprobs: int | None = field(default=None, repr=False)
    include_stop_str_in_output: bool | None = field(default=None, repr=False)

    def __post_init__(self):
        _check_number("temperature", self.temperature, *RANGES["temperature"])
        _check_number("top_p", self.top_p, *RANGES["top_p"])
        _check_int("top_k", self.top_k, *RANGES["top_k"])
        _check_int("max_tokens", self.max_tokens, *RANGES["max_tokens"])
        _check_int("seed", self.seed, lambda v: True, "an int")
        # Only the chosen token's log-probability is computed: a larger count would silently
        # give one entry where vLLM gives that many alternatives.
        _check_int("logprobs", self.logprobs, lambda v: 0 <= v <= 1, "0 or 1 (the chosen token's log-probability)")
        self.stop = [self.stop] if isinstance(self.stop, str) else _listed("stop", self.stop)
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise request_error(f"SamplingParams: stop must be non-empty strings, got {s!r}",
                                    help="pass one string or a list of non-empty strings")
        self.stop_token_ids = _listed("stop_token_ids", self.stop_token_ids)
        for i in self.stop_token_ids:
            _check_int("stop_token_ids", i, lambda v: v >= 0, "a list of token ids >= 0")
        for name in ("ignore_eos", "skip_special_tokens"):      # "false" would be truthy: ignore_eos on
            if not isinstance(getattr(self, name), bool):
                raise request_error(f"SamplingParams: {name} must be True or False, got {getattr(self, name)!r}",
                                    help=f"pass {name}=True or {name}=False (a bool, not a string)")
        for name, (neutral, instead) in NOT_APPLIED.items():
            value = getattr(self, name)
            if not is_neutral(value, neutral):
                only = "None" if neutral is None else f"{neutral!r} (or None)"
                raise request_error(f"SamplingParams: {name}={value!r} is not supported: tilesafe.engine does not "
                                    f"implement {name}, so it takes only {only}", help=instead)

    def resolved(self, defaults: dict) -> "SamplingParams":
        """A copy with each unset parameter taken from `defaults` (generation_config.json's
        sampling values), then from vLLM's defaults."""
        values = {}
        for name, fallback in DEFAULTS.items():
            if getattr(self, name) is None:
                values[name] = defaults.get(name, fallback)
        # Made here, not by dataclasses.replace: the values are checked again (the object is
        # mutable), and an error must point past this module at the user's generate line, not
        # at dataclasses.py (caller_loc stops at the first frame outside tilesafe).
        kept = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return SamplingParams(**{**kept, **values})


def is_neutral(value, neutral) -> bool:
    """Whether `value` is None or equal to `neutral` (a bool is not taken for a number, nor a
    number for a bool: True is not n=1)."""
    return value is None or (isinstance(value, (int, float, dict, list)) and value == neutral
                             and isinstance(value, bool) == isinstance(neutral, bool))


def _listed(name: str, value) -> list:
    """`value` as a list (None: empty); anything but a list or tuple is refused naming the
    parameter, not left to fail later as a TypeError."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise request_error(f"SamplingParams: {name} must be a list, got {type(value).__name__} {value!r}",
                            help=f"pass a list, e.g. {name}=[...]")
    return list(value)


# What to do instead of a bad value, by parameter.
_HELP = {"temperature": "0 samples greedily; leave it unset for the checkpoint's default",
         "top_p": "1 keeps every token; leave it unset for the checkpoint's default",
         "top_k": "0 or -1 keeps every token; leave it unset for the checkpoint's default",
         "max_tokens": "leave it unset for the checkpoint's default (16 without one)",
         "seed": "pass an int, or leave it unset for a fresh random seed",
         "logprobs": "pass 1 for each generated token's log-probability (alternatives are not computed)",
         "stop_token_ids": "pass token ids, e.g. stop_token_ids=[151645]"}


def _check_number(name: str, value, ok, limit: str) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not ok(value):
        raise request_error(f"SamplingParams: {name} must be {limit}, got {value!r}", help=_HELP[name])


def _check_int(name: str, value, ok, limit: str) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
        raise request_error(f"SamplingParams: {name} must be {limit}, got {value!r}", help=_HELP[name])
