"""`ts.graph()` on a real CUDA capture (issue 23, items 4-7) and threads launching at once on
the GPU (run with `pytest -m gpu`). The host-side rules are also tested on the CPU through a
stand-in capture: tests/runtime/test_graph_capture.py."""
import threading

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk

from gpu_kernels import scale, spin

pytestmark = pytest.mark.gpu
N, B = 1 << 16, 1024
SLOW = 200_000   # iterations of `spin`: tens of milliseconds


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return ts.tensor(rng.standard_normal(N).astype(np.float32), device="cuda")


def _warm_up(x):
    """Compile `scale` outside any capture (same specialization as the captured launches)."""
    scale(ts.zeros(N, device="cuda").partition((B,)), x, a=1.0).sync()


def test_a_captured_output_is_written_by_the_first_replay_not_by_the_capture():
    x = _inputs()
    _warm_up(x)
    z = ts.empty(N, device="cuda")
    with ts.graph() as g:
        p = z.partition((B,))
        scale(p, x, a=2.0)
    z = p.unpartition()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        z.numpy()                                   # nothing ran yet: the bytes are garbage
    out = ts.empty(N, device="cuda")
    with pytest.raises(ts.OwnershipError, match="is read, but it came from ts.empty"):
        scale(out.partition((B,)), z, a=1.0)
    g.replay().sync()
    np.testing.assert_allclose(z.numpy(), x.numpy() * 2.0, rtol=1e-6)


def test_a_failed_capture_leaves_its_outputs_unwritten_and_cannot_replay():
    x = _inputs()
    _warm_up(x)
    z = ts.empty(N, device="cuda")
    with pytest.raises(ZeroDivisionError):
        with ts.graph() as g:
            p = z.partition((B,))
            scale(p, x, a=2.0)
            1 / 0
    z = p.unpartition()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        z.numpy()
    with pytest.raises(ts.LaunchError, match="its capture did not complete"):
        g.replay()


def test_captured_launches_read_what_earlier_captured_launches_wrote():
    x = _inputs()
    _warm_up(x)
    mid, out = ts.empty(N, device="cuda"), ts.empty(N, device="cuda")
    with ts.graph() as g:
        p = mid.partition((B,))
        scale(p, x, a=2.0)
        mid = p.unpartition()
        q = out.partition((B,))
        scale(q, mid, a=3.0)
    out = q.unpartition()
    for _ in range(2):
        g.replay().sync()
        np.testing.assert_allclose(out.numpy(), x.numpy() * 6.0, rtol=1e-6)


def test_a_library_call_without_out_is_refused_and_the_capture_goes_on():
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(8, 512, device="cuda", generator=gen)
    w = torch.randn(512, device="cuda", generator=gen)
    y = torch.full((8, 512), float("nan"), device="cuda")
    want = tk.rms_norm(x, w)                        # eager: allocates; compiles outside the capture
    with ts.graph() as g:
        with pytest.raises(ts.OwnershipError, match="rms_norm: allocating its output `out`"):
            tk.rms_norm(x, w)
        tk.rms_norm(x, w, out=y)                    # the refusal called no CUDA: the capture is intact
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, want, rtol=0, atol=0)


def test_launches_on_another_stream_are_refused_inside_a_capture():
    x = _inputs()
    _warm_up(x)
    z = ts.zeros(N, device="cuda")
    side = torch.cuda.Stream()
    with ts.graph() as g:
        p = z.partition((B,))
        with pytest.raises(ts.LaunchError, match=r"`with ts.stream\(\):` is not allowed while capturing"):
            ts.stream()
        with torch.cuda.stream(side):
            with pytest.raises(ts.LaunchError, match="launched on another stream than the one ts.graph"):
                scale(p, x, a=5.0)
        scale(p, x, a=2.0)                          # on the capture's stream: captured
    z = p.unpartition()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(z.numpy(), np.zeros(N, np.float32))   # nothing ran eagerly
    g.replay().sync()
    np.testing.assert_allclose(z.numpy(), x.numpy() * 2.0, rtol=1e-6)


def test_host_handover_and_polls_after_unwaited_eager_work_keep_the_capture_valid():
    """Eager work nobody waited for is still registered as pending when the capture starts:
    handing its output to torch must not poll its event (illegal while capturing), and
    polling a future is a TileSafeError raised before CUDA is asked."""
    x = _inputs()
    _warm_up(x)
    spin(ts.zeros(N, device="cuda").partition((B,)), x, n=1).sync()   # compile spin too
    fut = spin(ts.zeros(N, device="cuda").partition((B,)), x, n=SLOW)   # not waited for
    mid = fut.results().unpartition()
    out = ts.full(N, np.nan, device="cuda")
    with ts.graph() as g:
        with pytest.raises(ts.OwnershipError, match=r"fut.done\(\) waits for the GPU"):
            fut.done()
        t = mid.to_torch()                          # the capture synchronised: no poll needed
        q = out.partition((B,))
        scale(q, ts.from_torch(t), a=3.0)
    out = q.unpartition()
    g.replay().sync()
    np.testing.assert_allclose(out.numpy(), (x.numpy() + 1.0) * 3.0, rtol=1e-6)
    assert fut.done()


def test_threads_launching_at_once_on_shared_inputs():
    x = _inputs()
    _warm_up(x)
    xv = x.numpy()
    outs = [ts.full(N, np.nan, device="cuda") for _ in range(6)]
    errors = []
    start = threading.Barrier(len(outs))

    def body(i):
        try:
            start.wait()
            stream = torch.cuda.Stream()
            for r in range(20):
                with ts.stream(stream):
                    p = outs[i].partition((B,))
                    scale(p, x, a=float(i + r))
                    got = p.unpartition().numpy()   # waits for this launch only (S9)
                np.testing.assert_allclose(got, xv * (i + r), rtol=1e-6)
        except BaseException as e:   # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(outs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_capturing_again_into_the_same_name_keeps_the_new_capture_valid():
    # `with ts.graph() as g:` in a loop drops the previous graph while the next one is
    # capturing; freeing its CUDA graph there would invalidate the capture.
    x = _inputs()
    _warm_up(x)
    z = ts.empty(N, device="cuda")
    p = z.partition((B,))
    for a in (2.0, 3.0, 5.0):
        with ts.graph() as g:
            scale(p, x, a=a)
    g.replay().sync()
    np.testing.assert_allclose(p.unpartition().numpy(), x.numpy() * 5.0, rtol=1e-6)
