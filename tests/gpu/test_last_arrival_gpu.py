"""S16 on the GPU: the last block of each group combines the group's tiles under real
concurrency, the ticket counters reset themselves between launches, graph replays and
launches on two streams (run with `pytest -m gpu`)."""
import numpy as np
import pytest
import torch

import tilesafe as ts

pytestmark = pytest.mark.gpu
S, N, B = 16, 1 << 16, 256


@ts.kernel
def column_sums(c: ts.MutLast[ts.f32, ("B",)], part: ts.Mut[ts.f32, (1, "B")], x: ts.Ref[ts.f32, (-1, -1)],
                B: ts.Const[int]):
    px = x.partition((1, B))
    part.store(px.load((ts.block_id(0), ts.block_id(1))) * 2.0)
    if ts.last_arrival():
        acc = ts.zeros((B,), ts.f32)
        for m in part.members():
            acc = acc + ts.reshape(part.load(m), (B,))
        c.store(acc)


def _data(seed):
    x = np.random.default_rng(seed).standard_normal((S, N)).astype(np.float32)
    return x, ts.tensor(x, device="cuda")


def _run(c, part, x):
    pc, pp = c.partition((B,)), part.partition((1, B))
    column_sums(pc, pp, x)
    pc.unpartition(), pp.unpartition()


def _counters_at_rest():
    from tilesafe.runtime import arrivals
    for buf in arrivals._BUFFERS.values():
        assert not buf.numpy().any()


def test_each_column_is_summed_once_by_its_last_block_and_the_counters_reset():
    x, xt = _data(0)
    want = 2 * x.astype(np.float64).sum(0)
    part = ts.full((S, N), np.nan, device="cuda")
    for seed in range(5):                          # repeated launches reuse the counters
        c = ts.full((N,), np.nan, device="cuda")
        _run(c, part, xt)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-5, atol=1e-4)
    _counters_at_rest()


def test_graph_replays_take_fresh_tickets():
    x, xt = _data(1)
    c, part = ts.full((N,), np.nan, device="cuda"), ts.empty((S, N), device="cuda")
    _run(c, part, xt)                              # eager first: compiles and allocates the counters
    with ts.graph() as g:
        _run(c, part, xt)
    for _ in range(10):
        c[:] = np.full(N, np.nan, np.float32)
        g.replay()
        np.testing.assert_allclose(c.numpy(), 2 * x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    _counters_at_rest()


def test_launches_on_two_streams_share_the_counters_in_order():
    (x1, t1), (x2, t2) = _data(2), _data(3)
    c1, c2 = ts.full((N,), np.nan, device="cuda"), ts.full((N,), np.nan, device="cuda")
    p1, p2 = ts.empty((S, N), device="cuda"), ts.empty((S, N), device="cuda")
    _run(c1, p1, t1)
    for _ in range(3):
        with ts.stream():
            _run(c1, p1, t1)
        with ts.stream():
            _run(c2, p2, t2)                       # S10 orders it after the other stream's tickets
    torch.cuda.synchronize()
    np.testing.assert_allclose(c1.numpy(), 2 * x1.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(c2.numpy(), 2 * x2.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    _counters_at_rest()
