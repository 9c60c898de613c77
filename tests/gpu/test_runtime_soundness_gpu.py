"""Issue 23 on a real GPU: every device write tilesafe issues is ordered, and storage identity
comes from the memory (run with `pytest -m gpu`).

Each test delays the work that must come first — `torch.cuda._sleep` on its stream, or the
slow `spin` kernel — so that a missing wait shows as wrong values, not as a lucky race. The
inputs are settled (read once on the host) before the delay: a launch's event is recorded
lazily, so an input still pending would make the other stream wait behind the delay for
its sake and hide the missing wait under test.
"""
import gc
import weakref

import numpy as np
import pytest
import torch

import tilesafe as ts

from gpu_kernels import scale, spin

pytestmark = pytest.mark.gpu
N, B = 1 << 16, 1024
SLOW = 200_000            # iterations of `spin`: tens of milliseconds
SLEEP = 200_000_000       # GPU clock cycles of torch.cuda._sleep: about 0.1 s


def _values(seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def _compile_first():
    """Compile scale and spin outside the timed parts (a first launch compiles for seconds,
    long enough to hide any race)."""
    x = ts.tensor(_values(9), device="cuda")
    scale(ts.zeros(N, device="cuda").partition((B,)), x, a=1.0).sync()
    spin(ts.zeros(N, device="cuda").partition((B,)), x, n=1).sync()
    torch.cuda.synchronize()


def _settled(*tensors):
    """Wait for and forget the pending work on each tensor (a host read prunes it)."""
    torch.cuda.synchronize()
    for t in tensors:
        t.numpy()
    return tensors


# -- issue 23 item 1: fills and copies are ordered like launches ------------------------------

def test_a_launch_waits_for_a_fill_on_another_stream():
    _compile_first()
    out = ts.full(N, np.nan, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        marker = torch.full((N,), -1.0, device="cuda")   # planted where the fill's memory will come from
        del marker
    with ts.stream(s):
        torch.cuda._sleep(SLEEP)
        z = ts.full(N, 7.0, device="cuda")                # queued behind the sleep on s
    fut = scale(out.partition((B,)), z, a=2.0)            # the default stream reads z
    np.testing.assert_array_equal(fut.sync().unpartition().numpy(), np.full(N, 14.0, np.float32))


def test_a_fill_cannot_land_after_a_launch_that_writes_on_another_stream():
    _compile_first()
    x, = _settled(ts.tensor(_values(), device="cuda"))
    torch.cuda._sleep(SLEEP)                              # the default stream is busy...
    z = ts.zeros(N, device="cuda")                        # ...so the fill runs late
    with ts.stream():
        fut = scale(z.partition((B,)), x, a=2.0)          # must run after the fill, not before
    np.testing.assert_allclose(fut.sync().unpartition().numpy(), _values() * 2.0, rtol=1e-6)


def test_a_launch_waits_for_a_host_copy_on_another_stream():
    _compile_first()
    src, y = _settled(ts.tensor(_values(), device="cuda"), ts.zeros(N, device="cuda"))
    out = ts.full(N, np.nan, device="cuda")
    s = torch.cuda.Stream()
    with ts.stream(s):
        torch.cuda._sleep(SLEEP)
        y[:] = src                                        # a device copy, queued behind the sleep
    fut = scale(out.partition((B,)), y, a=1.0)            # the default stream reads y
    np.testing.assert_array_equal(fut.sync().unpartition().numpy(), _values())


def test_a_launch_that_overwrites_a_copy_source_waits_for_the_copy():
    _compile_first()
    src, other, y = _settled(ts.tensor(_values(), device="cuda"), ts.tensor(_values(1), device="cuda"),
                             ts.zeros(N, device="cuda"))
    s = torch.cuda.Stream()
    with ts.stream(s):
        torch.cuda._sleep(SLEEP)
        y[:] = src                                        # reads src late, on s
    scale(src.partition((B,)), other, a=3.0).sync()       # the default stream overwrites src
    np.testing.assert_array_equal(y.numpy(), _values())   # the copy saw the old values


def test_a_launch_that_overwrites_a_cloned_tensor_waits_for_the_clone():
    _compile_first()
    x, other = _settled(ts.tensor(_values(), device="cuda"), ts.tensor(_values(1), device="cuda"))
    torch.cuda._sleep(SLEEP)
    copy = x.to_torch(copy=True)                          # the clone reads x behind the sleep
    with ts.stream():
        fut = scale(x.partition((B,)), other, a=3.0)      # writes x on another stream
    fut.sync()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(copy.cpu().numpy(), _values())


# -- issue 23 item 2: a torch source with a pending tilesafe writer -----------------------------

@pytest.mark.parametrize("read", [
    lambda t: ts.tensor(t).numpy(),
    lambda t: _assigned(t).numpy(),
], ids=["ts.tensor(t)", "z[...] = t"])
def test_a_torch_source_is_read_after_its_pending_tilesafe_writer(read):
    _compile_first()
    x, = _settled(ts.tensor(_values(), device="cuda"))
    t = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with ts.stream():
        fut = spin(ts.from_torch(t).partition((B,)), x, n=SLOW)   # writes t slowly on another stream
    np.testing.assert_allclose(read(t), _values() + 1.0, rtol=1e-6)
    fut.sync().unpartition()


def _assigned(t):
    z = ts.zeros(N, device="cuda")
    z[...] = t
    return z


# -- issue 23 item 3: a DLPack alias of tilesafe memory on the GPU -----------------------------

def test_a_dlpack_alias_is_ordered_after_a_pending_write():
    _compile_first()
    x, out = _settled(ts.tensor(_values(), device="cuda"), ts.full(N, np.nan, device="cuda"))
    t = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with ts.stream():
        fut = spin(ts.from_torch(t).partition((B,)), x, n=SLOW)
    alias = ts.from_torch(torch.from_dlpack(t))
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        alias.partition((B,))                             # no second writer of the lent bytes
    with ts.stream():
        f2 = scale(out.partition((B,)), alias, a=2.0)     # a third stream reads the alias
    np.testing.assert_allclose(f2.sync().unpartition().numpy(), (_values() + 1.0) * 2.0, rtol=1e-6)
    fut.sync().unpartition()


def test_a_host_read_through_a_dlpack_alias_waits():
    _compile_first()
    x, = _settled(ts.tensor(_values(), device="cuda"))
    t = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with ts.stream():
        fut = spin(ts.from_torch(t).partition((B,)), x, n=SLOW)
    seen = ts.from_torch(torch.from_dlpack(t)).numpy()
    np.testing.assert_allclose(seen, _values() + 1.0, rtol=1e-6)
    fut.sync().unpartition()


def test_a_dlpack_alias_of_unwritten_empty_memory_is_not_readable():
    e = ts.empty(N, device="cuda")
    e[: N // 2] = 1.0
    alias = ts.from_torch(torch.from_dlpack(e.to_torch()))
    np.testing.assert_array_equal(alias[: N // 2].numpy(), np.ones(N // 2, np.float32))
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        alias.numpy()


def test_a_reused_address_starts_afresh():
    pool = torch.cuda.MemPool()                           # a private pool: the block is handed out again
    with torch.cuda.use_mem_pool(pool):
        e = ts.empty(N, device="cuda")
        address = e._torch().data_ptr()
        e.to_torch()                                      # handed over unwritten, then dropped
        del e
        t = torch.full((N,), 3.0, device="cuda")
    assert t.data_ptr() == address
    np.testing.assert_array_equal(ts.from_torch(t).numpy(), np.full(N, 3.0, np.float32))
    del t


def test_filled_and_copied_tensors_are_freed_when_dropped():
    # A recorded fill or copy must not keep its tensors alive through their own registries
    # (a cycle through torch storages that Python's collector cannot see): memory would leak.
    z = ts.full(N, 2.0, device="cuda")
    src = ts.tensor(_values(), device="cuda")
    y = ts.empty(N, device="cuda")
    y[:] = src
    storages = [weakref.ref(t._torch().untyped_storage()) for t in (z, src, y)]
    del z, src, y
    gc.collect()
    assert [ref() for ref in storages] == [None, None, None]
