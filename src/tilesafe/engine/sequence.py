"""One request's state while it generates: its tokens, text and why it stopped.

Stop rules, checked after every token in this order: a stop token id, an EOS id (unless
`ignore_eos`), a stop string in the text (the text is cut before it), `max_tokens`, and the
model length (prompt + output never exceeds `max_model_len`). Streamed text holds back the
last characters that could still begin a stop string, so a stream never shows text that the
final output cuts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams


@dataclass(slots=True)
class Sequence:
    index: int
    prompt: str | None
    prompt_ids: list[int]
    params: SamplingParams
    max_model_len: int
    eos_ids: frozenset
    detokenizer: object = None            # IncrementalDetokenizer when the model has a tokenizer
    seed: int = 0                         # the sampler's seed for this request (its own, or drawn once)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    emitted: int = 0                      # characters of `text` already streamed
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def position(self) -> int:
        """Where the last generated token goes in the cache when it is fed back."""
        return len(self.prompt_ids) + len(self.tokens) - 1

    def append(self, token: int, logprob: float) -> None:
        self.tokens.append(token)
        self.logprobs.append(logprob)
        p = self.params
        if self.detokenizer is not None and not self.finished:
            self.text += self.detokenizer.add(token)
        if token in p.stop_token_ids:
            self._finish("stop", token)
        elif token in self.eos_ids and not p.ignore_eos:
            self._finish("stop", None)
        elif self._stop_string():
            return
        elif len(self.tokens) >= p.max_tokens or len(self.prompt_ids) + len(self.tokens) >= self.max_model_len:
            self._finish("length", None)

    def new_text(self) -> str:
        """Text not streamed yet that no stop string can still cut."""
        keep = 0 if self.finished else max((len(s) - 1 for s in self.params.stop), default=0)
        end = max(self.emitted, len(self.text) - keep)
        new, self.emitted = self.text[self.emitted:end], end
        return new

    def output(self, request_id: str) -> RequestOutput:
        p = self.params
        logprobs = [{t: Logprob(lp, rank=1)} for t, lp in zip(self.tokens, self.logprobs)] if p.logprobs is not None \
            else None
        done = CompletionOutput(0, self.text, list(self.tokens), sum(self.logprobs) if p.logprobs is not None else None,
                                logprobs, self.finish_reason, self.stop_reason)
        return RequestOutput(request_id, self.prompt, list(self.prompt_ids), [done], self.finished)

    def _stop_string(self) -> bool:
        for s in self.params.stop:
            at = self.text.find(s)
            if at >= 0:
                self.text = self.text[:at]
                self._finish("stop", s)
                return True
        return False

    def _finish(self, reason: str, stop_reason) -> None:
        self.finish_reason, self.stop_reason = reason, stop_reason
        if self.detokenizer is not None and not isinstance(stop_reason, str):   # a stop string cut the text
            self.text += self.detokenizer.finish()
