"""The server's Prometheus metrics (`/metrics`), in a registry of its own so several servers
can live in one process (tests).

The engine thread reports into it (`EngineCore(metrics=...)`): tokens as they are admitted
and generated, time to first token and inter-token latency per token, and after every step
the running and waiting requests, the KV blocks in use and the prefix cache's lookups and
hits. prometheus-client's metrics are
thread-safe, so the server thread reads them at any time.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                    2.5, 5.0, 10.0, 20.0, 60.0)


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = r = CollectorRegistry()
        labels = ["model_name"]
        self.prompt_tokens = Counter("tilesafe_prompt_tokens", "Prompt tokens of admitted requests", labels,
                                     registry=r).labels(model_name)
        self.generation_tokens = Counter("tilesafe_generation_tokens", "Generated tokens", labels,
                                         registry=r).labels(model_name)
        self.requests = Counter("tilesafe_requests", "Requests added to the engine", labels,
                                registry=r).labels(model_name)
        self.ttft = Histogram("tilesafe_time_to_first_token_seconds", "Time from arrival to the first token",
                              labels, buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.itl = Histogram("tilesafe_inter_token_latency_seconds", "Time between a request's tokens", labels,
                             buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.running = Gauge("tilesafe_num_requests_running", "Requests in the running batch", labels,
                             registry=r).labels(model_name)
        self.waiting = Gauge("tilesafe_num_requests_waiting", "Requests waiting for admission", labels,
                             registry=r).labels(model_name)
        self.kv_used = Gauge("tilesafe_kv_blocks_in_use", "KV cache blocks held by running requests", labels,
                             registry=r).labels(model_name)
        self.kv_total = Gauge("tilesafe_kv_blocks_total", "KV cache blocks", labels, registry=r).labels(model_name)
        self.prefix_queries = Counter("tilesafe_prefix_cache_queries", "Full prompt blocks looked up in the prefix "
                                      "cache", labels, registry=r).labels(model_name)
        self.prefix_hits = Counter("tilesafe_prefix_cache_hits", "Prompt blocks found in the prefix cache (their "
                                   "KV not computed again)", labels, registry=r).labels(model_name)
        self._prefix = (0, 0)
        self._state = None              # the last state() written

    # -- called by the engine thread -----------------------------------------------------
    def request_added(self, prompt_tokens: int) -> None:
        self.requests.inc()
        self.prompt_tokens.inc(prompt_tokens)

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def inter_token(self, seconds: float, tokens: int = 1) -> None:
        """`tokens` tokens went out together `seconds` after the request's previous ones (a
        stream interval held them): each is observed with its share of the gap."""
        observe_many(self.itl, seconds / tokens, tokens)

    def inter_tokens(self, counts: dict[float, int]) -> None:
        """A step's inter-token latencies: {seconds: tokens}. The requests a step emits mostly
        share one gap (their previous tokens went out together), so this is one histogram
        update per distinct gap instead of one per token (at 128 requests the per-token
        updates were a fifth of the engine thread's host time)."""
        for seconds, n in counts.items():
            observe_many(self.itl, seconds, n)

    def generated(self, n: int) -> None:
        self.generation_tokens.inc(n)

    def state(self, running: int, waiting: int, kv_used: int, kv_total: int, prefix_hits: int = 0,
              prefix_queries: int = 0) -> None:
        """The engine's state after a step; the prefix-cache counts are totals since it started.
        Unchanged since the last call (most decode steps): nothing to write."""
        now = (running, waiting, kv_used, kv_total, prefix_hits, prefix_queries)
        if now == self._state:
            return
        self._state = now
        hits, queries = self._prefix
        self.prefix_hits.inc(max(prefix_hits - hits, 0))
        self.prefix_queries.inc(max(prefix_queries - queries, 0))
        self._prefix = (prefix_hits, prefix_queries)
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_used.set(kv_used)
        self.kv_total.set(kv_total)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)


def observe_many(hist, value: float, n: int) -> None:
    """`n` observations of `value` in a prometheus-client Histogram at once: its sum and one
    bucket updated by n (what n observe() calls do one by one); one by one where the
    histogram's fields are not the ones this was written against."""
    try:
        bounds, buckets, total = hist._upper_bounds, hist._buckets, hist._sum
    except AttributeError:
        for _ in range(n):
            hist.observe(value)
        return
    total.inc(value * n)
    for bound, bucket in zip(bounds, buckets):
        if value <= bound:
            bucket.inc(n)
            break
