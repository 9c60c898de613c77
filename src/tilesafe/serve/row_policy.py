"""`ItlRows`: decode-step rows sized by the inter-token bound (EngineCore's
`decode_step_tokens="itl"`), used only while they keep up with the prompts waiting.

A row step costs its row bucket's decode step (the buckets' replays are timed after the
warm-up), and every decoding request in it waits that long for its next token. So a step
with d decode rows takes the largest bucket whose timed step is within `bound_s` (issue 19's
inter-token bound, twice the batch-1 step, times `ITL_SHARE`), at least the bucket d fills.
Held there, a closed loop of many clients queues (at 128 clients, 128-row steps left 85
clients waiting ~0.7 s for their first token, session 19), so the rows *keep up* only while
the prompt tokens waiting or under way take at most as many steps of that size as the
decoding requests live (their mean `max_tokens`: the steps until their slots free), and only
while the decodes alone keep the bound. Past that, the scheduler takes whole fresh prompts
as without rows (mixed steps: the fastest way through a queue, session 19's best at 128
clients), and a prompt already under way as rows finishes in rows grown to keep up (the
smallest bucket that does, else the largest; no new prompt joins them). A step without decode
rows has no inter-token gap to keep: the largest bucket.
"""
from __future__ import annotations

from dataclasses import dataclass

# The share of twice the batch-1 step that a row step's timed replay may take. Session 19
# (H200, 4B, 32 clients): a 128-row step replayed in 3.88 ms ran 5.05 ms of wall time in the
# server (1.3x: real rows' KV, staging, outputs) and the clients' p99 gap was 6.15 ms (1.2x
# that), 1.17x the bound: a p99 inside it needs a replay within ~0.65 of it, and 0.7 picks
# 64 rows (3.34 ms; 128 rows, 3.88 ms, is past 3.67). A closed-loop model of the scheduler
# with those step times (serve_load's steps) has 64-row steps cost a quarter of the 32-client
# throughput (one prompt's 128 rows over four steps), 128-row steps 4%.
ITL_SHARE = 0.7


@dataclass(frozen=True, slots=True)
class ItlRows:
    times: dict[int, float]     # seconds per replay of each row bucket's step (EngineCore.decode_step_times)
    bound_s: float              # a row step beside decode rows replays within this

    @classmethod
    def from_times(cls, times: dict[int, float], share: float = ITL_SHARE) -> "ItlRows | None":
        """The bound: `share` of twice the smallest bucket's step (the batch-1 step); None
        without timed buckets."""
        if not times:
            return None
        return cls(dict(sorted(times.items())), share * 2.0 * times[min(times)])

    def keeps_up(self, decode_rows: int, fill: int, queued: int, lifetime: float) -> bool:
        """Whether row steps within the bound serve this step: the decodes alone keep the bound
        and the bound's bucket prefills the queued prompt tokens within the decodes' lifetime."""
        own = self.times.get(fill, float("inf"))
        if decode_rows == 0 or own > self.bound_s:
            return False
        itl = max([c for c in self.times if self.times[c] <= self.bound_s] + [fill])
        return queued <= 0 or _steps(queued, itl, decode_rows) <= lifetime

    def limit(self, decode_rows: int, fill: int, queued: int, lifetime: float) -> int:
        """Rows of a step with `decode_rows` decodes (which fill bucket `fill`), `queued`
        prompt tokens waiting or under way and decoding requests that live `lifetime` steps."""
        buckets = list(self.times)
        if decode_rows == 0:
            return buckets[-1]
        own = self.times.get(fill, float("inf"))
        if own > self.bound_s:          # the decodes alone miss the bound: a prompt may double their step
            return max([c for c in buckets if self.times[c] <= 2.0 * own] + [fill])
        itl = max([c for c in buckets if self.times[c] <= self.bound_s] + [fill])
        if queued <= 0 or _steps(queued, itl, decode_rows) <= lifetime:
            return itl
        return next((c for c in buckets if c > itl and _steps(queued, c, decode_rows) <= lifetime), buckets[-1])

    def __repr__(self) -> str:
        return f"ItlRows(bound {self.bound_s * 1e3:.2f} ms)"


def _steps(queued: int, rows: int, decode_rows: int) -> float:
    """Steps of `rows` rows that prefill `queued` prompt tokens beside `decode_rows` decodes."""
    free = rows - decode_rows
    return -(-queued // free) if free > 0 else float("inf")
