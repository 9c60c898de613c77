"""`ItlRows`: decode-step rows sized by the inter-token bound (EngineCore's
`decode_step_tokens="itl"`), used only while they keep up with the prompts waiting.

A row step costs its row bucket's decode step (the decode buckets' replays are timed after
the warm-up), and every decoding request in it waits that long for its next token. So a
step with d decode rows takes the largest bucket whose timed step is within `bound_s`
(issue 19's inter-token bound, twice the batch-1 step, times `ITL_SHARE`), at least the
bucket d fills. Held there, a closed loop of many clients queues (at 128 clients, 128-row
steps left 85 clients waiting ~0.7 s for their first token, session 19), so the rows *keep
up* only while the prompt tokens waiting or under way take at most as many steps of that
size as the decoding requests live (their mean `max_tokens`: the steps until their slots
free), and only while the decodes alone keep the bound. Past that, the scheduler takes
whole fresh prompts as without rows (mixed steps: session 19's best at 128 clients), and a
prompt already under way as rows finishes in rows (no new prompt joins them). A step without
decode rows, or whose decodes alone miss the bound, has no gap to keep: the largest bucket.
"""
from __future__ import annotations

from dataclasses import dataclass

# The share of twice the batch-1 step that a row step's timed replay may take. Measured on the
# H200 (4B, 32 clients of 128-token prompts and 64-token outputs; bound 2 x 2.65 ms): 1.0 picks
# 128 rows (3.92 ms; session 19: throughput 0.99 of the offline engine, p99 gap 6.15 ms, 1.13x
# the bound: a row step runs ~1.3x its padded replay in the server); 0.7 picks 64 rows (3.38
# ms; session 20: p99 6.20 ms, 1.14x, its slowest 1% the first decode step in each smaller
# bucket as the batch drains, +1.6-2.1 ms; throughput 0.82: a prompt's 128 rows over 4 steps).
ITL_SHARE = 1.0


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

    def keeps_up(self, decode_rows: int, fill: int, queued: int, prompts: int, lifetime: float) -> bool:
        """Whether row steps within the bound serve this step: the decodes alone keep the bound,
        and the bound's bucket prefills the `queued` prompt tokens (of `prompts` prompts) within
        the decodes' lifetime and as fast as the decodes free their slots (a finishing request's
        successor needs its prompt's rows: free rows >= decode rows x mean prompt / lifetime)."""
        if decode_rows == 0 or self.times.get(fill, float("inf")) > self.bound_s:
            return False
        if queued <= 0:
            return True
        free = self.limit(decode_rows, fill) - decode_rows
        return _steps(queued, free + decode_rows, decode_rows) <= lifetime \
            and free * lifetime >= decode_rows * queued / prompts

    def limit(self, decode_rows: int, fill: int) -> int:
        """Rows of a step with `decode_rows` decodes, which fill bucket `fill`."""
        buckets = list(self.times)
        if decode_rows == 0 or self.times.get(fill, float("inf")) > self.bound_s:
            return buckets[-1]
        return max([c for c in buckets if self.times[c] <= self.bound_s] + [fill])

    def __repr__(self) -> str:
        return f"ItlRows(bound {self.bound_s * 1e3:.2f} ms)"


def _steps(queued: int, rows: int, decode_rows: int) -> float:
    """Steps of `rows` rows that prefill `queued` prompt tokens beside `decode_rows` decodes."""
    free = rows - decode_rows
    return -(-queued // free) if free > 0 else float("inf")
