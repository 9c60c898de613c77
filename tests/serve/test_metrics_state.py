"""ServerMetrics.state skips writing an unchanged state (most decode steps) but never a change:
the gauges and the prefix-cache counters always read the last state given."""
import re

import pytest

pytest.importorskip("prometheus_client")

from tilesafe.serve.metrics import ServerMetrics  # noqa: E402


def read(m, name):
    return float(re.search(rf"^{name}{{[^}}]*}} ([0-9.e+-]+)$", m.render().decode(), re.M).group(1))


def test_state_writes_every_change_once():
    m = ServerMetrics("m")
    for state in [(2, 1, 5, 10, 3, 4), (2, 1, 5, 10, 3, 4), (1, 0, 6, 10, 3, 4), (1, 0, 6, 10, 5, 9),
                  (1, 0, 6, 10, 5, 9), (0, 0, 0, 10, 5, 9)]:
        m.state(*state)
        got = [read(m, n) for n in ("tilesafe_num_requests_running", "tilesafe_num_requests_waiting",
                                    "tilesafe_kv_blocks_in_use", "tilesafe_kv_blocks_total",
                                    "tilesafe_prefix_cache_hits_total", "tilesafe_prefix_cache_queries_total")]
        assert got == list(map(float, state))


def test_a_steps_inter_token_latencies_in_bulk_render_as_one_observation_per_token():
    """inter_tokens({seconds: n}) (the engine's one update per distinct gap a step) renders
    exactly what n observe() calls per gap do — bucket counts, count and sum — including a
    value on a bucket's bound and one past the last."""
    from prometheus_client import generate_latest
    bulk, single = ServerMetrics("m"), ServerMetrics("m")
    counts = {0.004: 120, 0.01: 3, 0.0123: 5, 90.0: 2}
    bulk.inter_tokens(counts)
    bulk.inter_token(0.03, 4)                       # 4 tokens held back together: 4 of 0.0075
    for seconds, n in list(counts.items()) + [(0.0075, 4)]:
        for _ in range(n):
            single.itl.observe(seconds)

    def samples(m):
        lines = [ln for ln in generate_latest(m.registry).decode().splitlines()
                 if ln.startswith("tilesafe_inter_token_latency_seconds") and "_created" not in ln]
        return {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in lines}
    got, want = samples(bulk), samples(single)
    assert got.keys() == want.keys() and len(got) == 23          # 21 buckets (+Inf), count, sum
    assert all(got[k] == want[k] for k in got if "_sum" not in k)
    assert got[next(k for k in got if "_sum" in k)] == pytest.approx(want[next(k for k in want if "_sum" in k)])
