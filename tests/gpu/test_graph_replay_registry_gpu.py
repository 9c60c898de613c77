"""`g.replay()` with its accesses standing in the registries (runtime/graph_registry.py) on a
real CUDA graph: replays that do no per-tensor work are still ordered after other streams'
writes, host reads wait for the latest replay, host writes wait for a replay still reading.
The same rules with a stand-in graph on the CPU: tests/runtime/test_graph_replay_registry.py."""
import numpy as np
import pytest
import torch

import tilesafe as ts

from gpu_kernels import scale, spin

pytestmark = pytest.mark.gpu
N, B = 1 << 16, 1024
SLOW = 200_000   # iterations of `spin`: tens of milliseconds


def _values(seed):
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def _warm_up():
    x = ts.zeros(N, device="cuda")
    scale(ts.zeros(N, device="cuda").partition((B,)), x, a=1.0).sync()
    spin(ts.zeros(N, device="cuda").partition((B,)), x, n=1).sync()


def test_each_replay_waits_for_a_slow_write_on_another_stream_to_what_it_reads():
    _warm_up()
    mid, out = ts.zeros(N, device="cuda"), ts.zeros(N, device="cuda")
    with ts.graph() as g:
        q = out.partition((B,))
        scale(q, mid, a=2.0)
    out = q.unpartition()
    side = torch.cuda.Stream()
    for r in range(4):                    # the first replay orders fully, the later ones by version
        src = ts.tensor(_values(r), device="cuda")
        with ts.stream(side):
            p = mid.partition((B,))
            spin(p, src, n=SLOW)          # mid = src + 1, slowly, on the side stream
            mid = p.unpartition()
        g.replay()                        # on the default stream: must wait for the side stream
        np.testing.assert_allclose(out.numpy(), (_values(r) + 1.0) * 2.0, rtol=1e-6)


def test_a_host_write_waits_for_a_replay_reading_it_and_a_host_read_for_the_latest_replay():
    _warm_up()
    src, z = ts.tensor(_values(0), device="cuda"), ts.zeros(N, device="cuda")
    with ts.graph() as g:
        p = z.partition((B,))
        spin(p, src, n=SLOW)              # z = src + 1, slowly
    z = p.unpartition()
    g.replay()
    src.copy_(_values(1))                 # must wait: the replay still reads src
    g.replay()
    np.testing.assert_allclose(z.numpy(), _values(1) + 1.0, rtol=1e-6)   # the second replay's
    g.replay()
    src.copy_(_values(2))
    np.testing.assert_allclose(z.numpy(), _values(1) + 1.0, rtol=1e-6)   # the third read values(1)


def test_replays_on_two_streams_and_an_eager_write_between_them_stay_ordered():
    _warm_up()
    src, z = ts.tensor(_values(0), device="cuda"), ts.zeros(N, device="cuda")
    out, new = ts.zeros(N, device="cuda"), ts.tensor(_values(1), device="cuda")
    with ts.graph() as g:
        p = z.partition((B,))
        spin(p, src, n=SLOW)              # z = src + 1, slowly
        z = p.unpartition()
        q = out.partition((B,))
        scale(q, z, a=3.0)
    out = q.unpartition()
    side = torch.cuda.Stream()
    g.replay()                            # default stream, reading src = values(0) slowly
    with ts.stream(side):
        r = src.partition((B,))
        scale(r, new, a=1.0)              # src = values(1): waits for the replay's read of src
        src = r.unpartition()
    with torch.cuda.stream(side):
        g.replay()                        # waits for the first replay's writes of z and out
    np.testing.assert_allclose(out.numpy(), (_values(1) + 1.0) * 3.0, rtol=1e-6)
    g.replay().sync()                     # back on the default stream, after the side stream's replay
    np.testing.assert_allclose(out.numpy(), (_values(1) + 1.0) * 3.0, rtol=1e-6)
