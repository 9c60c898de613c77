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
