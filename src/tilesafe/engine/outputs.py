"""What `LLM.generate` returns, shaped as vLLM's offline API: one `RequestOutput` per prompt."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Logprob:
    logprob: float
    rank: int | None = None            # 1 for the most likely token
    decoded_token: str | None = None


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None   # with logprobs: one {token_id: Logprob} per token
    finish_reason: str | None = None   # "stop" (EOS, a stop token or string) or "length"
    stop_reason: int | str | None = None   # the stop token id or stop string; None for EOS or length


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True
