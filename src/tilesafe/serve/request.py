"""One request inside the serving engine: the engine's `Sequence` (tokens, text, stop rules)
plus what the scheduler and the metrics need — its arrival order, how many of its tokens
have their KV in the cache while it runs, and where its outputs go."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..engine.sequence import Sequence
from .outputs import StreamOutput


@dataclass(eq=False, slots=True)
class Request:
    request_id: str
    seq: Sequence
    sink: Callable[[object], None]             # called (on the engine thread) with each StreamOutput
    order: int = 0                             # arrival order: FIFO admission, latest preempted first
    arrival: float = field(default_factory=time.monotonic)
    running: bool = False                      # admitted: holds KV blocks (the block manager's table)
    computed: int = 0                          # leading kv_tokens whose KV is in the cache (while running)
    cached: int = 0                            # of those, taken from the prefix cache at admission
    sent: int = 0                              # tokens already sent to the sink
    first_token_at: float | None = None
    last_token_at: float | None = None
    preemptions: int = 0

    @property
    def kv_tokens(self) -> list[int]:
        """The tokens whose KV a (re)started prefill computes: the prompt, then every
        generated token (after a preemption they are recomputed, not generated again)."""
        return self.seq.prompt_ids + self.seq.tokens

    @property
    def uncomputed(self) -> int:
        """Tokens whose KV the model must still compute: 1 for a decoding request (the token
        it feeds back), more for a prompt being prefilled (chunk by chunk)."""
        return len(self.seq.prompt_ids) + len(self.seq.tokens) - self.computed

    def take_output(self) -> StreamOutput:
        """The tokens and text new since the last call, as one output."""
        s = self.seq
        new = s.tokens[self.sent:]
        logprobs = s.logprobs[self.sent:] if s.params.logprobs is not None else None
        self.sent = len(s.tokens)
        # Without a detokenizer here (AsyncLLM detokenizes on its event loop) the text stays empty:
        # no new_text() call, a tenth of the engine thread's output work at 128 requests.
        text = s.new_text() if s.detokenizer is not None or s.emitted < len(s.text) else ""
        return StreamOutput(self.request_id, text, new, logprobs, s.prompt_ids, len(s.tokens),
                            s.finished, s.finish_reason, s.stop_reason)

    def aborted_output(self) -> StreamOutput:
        """The last output of a request cancelled by the engine (shutdown)."""
        return StreamOutput(self.request_id, "", [], None, self.seq.prompt_ids, len(self.seq.tokens), True, "abort")
