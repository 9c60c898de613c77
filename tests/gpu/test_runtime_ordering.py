"""S8-S10, S12-S15 under real asynchrony on the GPU (run with `pytest -m gpu`)."""
import numpy as np
import pytest
import torch

import tilesafe as ts

from gpu_kernels import add, matvec, rms_norm, scale, spin

pytestmark = pytest.mark.gpu
N, B = 1 << 16, 1024
SLOW = 200_000   # iterations of `spin`: tens of milliseconds


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return ts.tensor(rng.standard_normal(N).astype(np.float32), device="cuda")


def test_launch_returns_before_the_gpu_finishes_and_host_read_waits():
    x = _inputs()
    z = ts.full(N, np.nan, device="cuda")
    spin(z.partition((B,)), x, n=1).sync()      # compile first: the timed launch only launches
    fut = spin(z.partition((B,)), x, n=SLOW * 10)
    assert not fut.done()                       # the launch is asynchronous
    out = fut.results().unpartition()
    np.testing.assert_allclose(out.numpy(), x.numpy() + 1, rtol=1e-6)   # S9: numpy() waited


def test_strict_sync_reports_an_implicit_wait():
    x = _inputs()
    z = ts.zeros(N, device="cuda")
    fut = spin(z.partition((B,)), x, n=SLOW)
    out = fut.results().unpartition()
    with ts.strict_sync():
        with pytest.raises(ts.OwnershipError, match="implicit wait"):
            out.numpy()
    fut.sync()
    with ts.strict_sync():
        out.numpy()


def test_host_write_waits_for_a_pending_reader():
    x = _inputs()
    expected = x.numpy() + 1
    z = ts.zeros(N, device="cuda")
    fut = spin(z.partition((B,)), x, n=SLOW)
    x[:] = np.zeros(N, np.float32)              # must wait until spin has read x
    np.testing.assert_allclose(fut.sync().unpartition().numpy(), expected, rtol=1e-6)


def test_view_of_a_partitioned_base_is_read_after_the_write_and_cannot_write():
    base = ts.zeros(N, device="cuda")
    view = base[: N // 2]                       # taken before the partition
    x = _inputs()
    p = base.partition((B,))
    fut = spin(p, x, n=SLOW)
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        view[:] = np.full(N // 2, 7.0, np.float32)   # S8 by bytes: lent bytes are written only via p
    np.testing.assert_allclose(view.numpy(), x.numpy()[: N // 2] + 1, rtol=1e-6)   # S9: waited
    fut.sync()
    p.unpartition()


def test_two_streams_are_ordered_by_bytes():
    x = _inputs()
    mid = ts.zeros(N, device="cuda")
    out = ts.full(N, np.nan, device="cuda")
    with ts.stream():
        f1 = spin(mid.partition((B,)), x, n=SLOW)            # writes mid, slowly
    mid = f1.results().unpartition()
    with ts.stream():
        f2 = scale(out.partition((B,)), mid, a=2.0)          # reads mid on another stream
    np.testing.assert_allclose(f2.sync().unpartition().numpy(), (x.numpy() + 1) * 2, rtol=1e-6)


def test_memory_stays_alive_while_pending():
    x = _inputs()
    expected = x.numpy() + 1
    z = ts.zeros(N, device="cuda")
    p = z.partition((B,))
    fut = spin(p, x, n=SLOW)
    del x                                       # the future keeps x's memory alive
    torch.cuda.empty_cache()
    junk = torch.full((N * 4,), 3.0, device="cuda")   # would reuse x's block if it were freed
    np.testing.assert_allclose(fut.sync().unpartition().numpy(), expected, rtol=1e-6)
    del junk


def test_graph_refuses_allocation_and_host_sync():
    x = _inputs()
    z = ts.zeros(N, device="cuda")
    scale(z.partition((B,)), x, a=1.0).sync()  # compile outside the capture
    p = z.partition((B,))
    with pytest.raises(ts.OwnershipError, match="allocating"):
        with ts.graph():
            ts.zeros(4)
    with pytest.raises(ts.OwnershipError, match="capturing"):
        with ts.graph():
            scale(p, x, a=2.0).sync()
    p.unpartition()


def _stack(layers, x, h, t1, t2, weights):
    """RMSNorm -> matvec -> matvec -> residual add, `layers` times; x <-> h ping-pong."""
    for w_norm, w_up, w_down in weights:
        rms_norm(t1.partition((1, 2048)), x, w_norm, eps=1e-6)
        matvec(t2.partition((1, 64)), t1, w_up, BK=128)
        matvec(t1.partition((1, 64)), t2, w_down, BK=128)
        add(h.partition((1, 2048)), x, t1)
        x, h = h, x
    return x


def test_graph_replay_of_22_layers_matches_eager():
    d, layers = 2048, 22
    rng = np.random.default_rng(1)
    mk = lambda *s: ts.tensor((rng.standard_normal(s) * 0.02).astype(np.float32), dtype=ts.bf16, device="cuda")
    weights = [(ts.tensor(np.ones(d, np.float32) + rng.standard_normal(d).astype(np.float32) * 0.1, dtype=ts.bf16,
                          device="cuda"), mk(d, d), mk(d, d)) for _ in range(layers)]
    x0 = rng.standard_normal((1, d)).astype(np.float32)
    bufs = lambda: [ts.tensor(x0, dtype=ts.bf16, device="cuda")] + [ts.zeros((1, d), ts.bf16, device="cuda")
                                                                    for _ in range(3)]
    x, h, t1, t2 = bufs()
    eager = _stack(layers, x, h, t1, t2, weights).numpy().astype(np.float32)

    x, h, t1, t2 = bufs()
    with ts.graph() as g:
        result = _stack(layers, x, h, t1, t2, weights)
    g.replay().sync()
    np.testing.assert_allclose(result.numpy().astype(np.float32), eager, rtol=2e-2, atol=2e-2)
    del weights                                  # the graph keeps the captured buffers alive
    torch.cuda.empty_cache()
    x.copy_(x0)
    g.replay().sync()
    np.testing.assert_allclose(result.numpy().astype(np.float32), eager, rtol=2e-2, atol=2e-2)
