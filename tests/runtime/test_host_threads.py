"""Python threads launching at once on shared tensors: the runtime's host-side steps (binding,
S8 lending, S14 marking, S9 registration, host reads) happen one thread at a time
(runtime/host_lock.py), so every check sees the others' steps whole.

The races are made likely, not certain: the interpreter switches threads every microsecond
here (`sys.setswitchinterval`), so unserialised steps interleave within a few iterations.
"""
import sys
import threading

import numpy as np
import pytest

import tilesafe as ts

B = 16


@ts.kernel
def scale(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, a: float):
    z.store(ts.load_tile_like(x, z) * a)


@pytest.fixture
def switch_often():
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(saved)


def run_threads(n, body):
    """Run body(i) in n threads started together; re-raise the first exception any raised."""
    errors, start = [], threading.Barrier(n)

    def run(i):
        try:
            start.wait()
            body(i)
        except BaseException as e:   # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.reference_only
def test_threads_writing_disjoint_slices_of_one_empty_tensor(backend, switch_often):
    """Each thread partitions its own slice of a shared ts.empty tensor and launches into it,
    reading a shared input: every result is right, and the shared S14 mask ends complete."""
    threads, rounds, per = 8, 12, 3 * B
    rng = np.random.default_rng(0)
    xv = rng.standard_normal(per).astype(np.float32)
    x = ts.tensor(xv)
    z = ts.empty(threads * per)
    views = [z[i * per:(i + 1) * per] for i in range(threads)]

    def body(i):
        for r in range(rounds):
            p = views[i].partition((B,))
            scale(p, x, a=float(i + r)).sync()
            got = p.unpartition().numpy()
            np.testing.assert_allclose(got, xv * (i + r), rtol=1e-6)

    run_threads(threads, body)
    want = np.concatenate([xv * (i + rounds - 1) for i in range(threads)])
    np.testing.assert_allclose(z.numpy(), want, rtol=1e-6)          # every byte marked written


@pytest.mark.reference_only
def test_threads_racing_to_partition_one_tensor_never_hold_two_partitions(backend, switch_often):
    """S8 across threads: of several threads partitioning the same tensor, one at a time
    succeeds; the others get the OwnershipError, never a second partition of lent bytes."""
    threads, rounds = 6, 150
    x = ts.tensor(np.arange(4 * B, dtype=np.float32))
    z = ts.zeros(4 * B)
    holders, lock, wins = [0], threading.Lock(), [0]

    def body(i):
        for r in range(rounds):
            try:
                p = z.partition((B,))
            except ts.OwnershipError as e:
                assert "lent to a partition" in e.message
                continue
            with lock:
                holders[0] += 1
                assert holders[0] == 1, "two threads hold partitions of the same bytes"
                wins[0] += 1
            scale(p, x, a=2.0)
            with lock:
                holders[0] -= 1
            p.unpartition()

    run_threads(threads, body)
    assert wins[0] > 0                           # some partitions were won and launched
    np.testing.assert_allclose(z.numpy(), np.arange(4 * B) * 2.0)


@pytest.mark.reference_only
def test_a_host_read_in_another_thread_never_sees_a_launch_half_done(backend, switch_often):
    """S9 across threads: on the CPU a launch runs in its caller's thread, tile after tile; a
    read of the same bytes from another thread (through a view taken before the lending,
    which S8 lets read) sees the memory before or after the launch, never in between."""
    tiles, rounds = 32, 25
    rng = np.random.default_rng(1)
    xv = rng.uniform(1.0, 2.0, tiles * B).astype(np.float32)
    x = ts.tensor(xv)
    z = ts.tensor(xv)
    seen = z[:]                                  # taken before z is lent

    def body(i):
        if i == 0:                               # the writer: z = x * r, one whole launch per round
            for r in range(2, rounds + 2):
                p = z.partition((B,))
                scale(p, x, a=float(r))
                p.unpartition()
        else:                                    # readers: every value from the same launch
            for _ in range(rounds):
                ratio = seen.numpy() / xv
                assert np.allclose(ratio, ratio[0], rtol=1e-6), f"a half-done launch was read: {np.unique(ratio)}"

    run_threads(3, body)


@pytest.mark.reference_only
def test_threads_calling_split_k_products_at_once_get_their_own_results(backend, switch_often):
    """A split-K product writes its partial sums into the device's scratch in one launch and
    sums them in the next; another thread's call between the two must not use the same bytes."""
    import tilesafe.kernels as tk
    threads, rounds = 4, 6
    rng = np.random.default_rng(2)
    w = ts.tensor(rng.standard_normal((32, 256)).astype(np.float32))
    xs = [rng.standard_normal((1, 256)).astype(np.float32) for _ in range(threads)]
    wv = w.numpy().astype(np.float64)

    def body(i):
        x = ts.tensor(xs[i])
        want = xs[i].astype(np.float64) @ wv.T
        for _ in range(rounds):
            y = tk.linear(x, w, out=ts.empty((1, 32)), config={"split_k": 4})
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)

    run_threads(threads, body)
