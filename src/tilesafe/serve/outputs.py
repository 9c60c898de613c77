"""What the serving engine streams back: one `StreamOutput` per request per step that gave
it tokens — the new text, the new token ids (and their log-probabilities), and, on the last
one, why it finished.

Joined, the `text` pieces of a request are its final text (stop strings cut, as the offline
`LLM.generate` cuts them): the engine's `Sequence` holds back text a stop string could still
remove.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class StreamOutput:
    request_id: str
    text: str                                  # text new since the previous output
    token_ids: list[int]                       # tokens new since the previous output
    logprobs: list[float] | None               # their log-probabilities (when the request asked)
    prompt_token_ids: list[int] = field(default_factory=list)
    num_generated: int = 0                     # tokens generated so far, these included
    finished: bool = False
    finish_reason: str | None = None           # "stop", "length", or "abort" (cancelled, shut down)
    stop_reason: int | str | None = None       # the stop token id or stop string
