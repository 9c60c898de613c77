"""`ItlRows`: decode-step rows sized by the inter-token bound (EngineCore's
`decode_step_tokens="itl"`), growing only when the prompts waiting would not be prefilled in time.

A row step costs its row bucket's decode step (the buckets' replays are timed after the
warm-up), and every decoding request in it waits that long for its next token. So a step
with d decode rows takes the largest bucket whose timed step is within `bound_s` (issue 19's
inter-token bound, twice the batch-1 step, less the host time a step has over its replay:
`ITL_SHARE`), at least the bucket d fills. That alone starves prompts when many wait (at 128
clients, 128-row steps left 85 clients queued ~0.7 s, session 19): when the prompt tokens
waiting or under way would take more steps at that size than the decoding requests live
(their mean `max_tokens`: the steps until their slots free), the step takes the smallest
bucket that prefills them within that lifetime, or the largest bucket there is. A step
without decode rows has no inter-token gap to keep: the largest bucket; nor has one whose
decode rows alone step past the bound (more than 64 decodes of the 4B on the H200): there a
prompt may double their step, as "auto" lets it (the largest bucket within twice theirs).
"""
from __future__ import annotations

from dataclasses import dataclass

# The share of twice the batch-1 step that a row step's timed replay may take. Session 19
# (H200, 4B, 32 clients): a 128-row step replayed in 3.88 ms ran 5.05 ms of wall time in the
# server (1.3x: real rows' KV, staging, outputs) and the clients' p99 gap was 6.15 ms (1.2x
# that), so a replay within 2 x 2.62 ms / (1.3 x 1.2) ~ 0.65 of the bound keeps the p99 gap
# inside it; 0.7 picks the same bucket (64 rows, 3.34 ms; 128 rows 3.88 ms is past 3.67).
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
