"""A launch's memory is released once the launch is done, even if nobody reads its results or
waits for it (runtime/future.py, `Holding`), and not before (S9). Run with `pytest -m gpu`.

Before the fix a launch's completion held its tensors while it sat in their own pending
registries, which nothing pruned once the tensors were no longer used: a loop of launches
into fresh outputs nobody read kept every output allocated.
"""
import gc

import numpy as np
import pytest
import torch

import tilesafe as ts

from gpu_kernels import scale, spin

pytestmark = pytest.mark.gpu
N, B = 1 << 18, 1024      # 1 MiB of f32 per tensor
SLOW = 200_000            # iterations of `spin`: tens of milliseconds
ROUNDS = 400


def _compiled(x):
    """Compile scale and spin outside the measured parts."""
    scale(ts.zeros(N, device="cuda").partition((B,)), x, a=1.0).sync()
    spin(ts.zeros(N, device="cuda").partition((B,)), x, n=1).sync()
    torch.cuda.synchronize()


def test_memory_of_launches_nobody_reads_stays_bounded():
    x = ts.tensor(np.ones(N, np.float32), device="cuda")
    _compiled(x)
    gc.collect()
    base = torch.cuda.memory_allocated()
    for _ in range(ROUNDS):
        z = ts.empty(N, device="cuda")
        scale(z.partition((B,)), x, a=2.0)          # never read, never waited for
    del z
    torch.cuda.synchronize()
    gc.collect()
    grown = torch.cuda.memory_allocated() - base
    # At most about Holding.limit (32) finished launches keep their memory until the next launch.
    assert grown <= 100 * N * 4, f"{grown / 2**20:.0f} MiB still allocated after {ROUNDS} unread launches"


def test_memory_of_launches_still_running_stays_alive_through_sweeps():
    """Many launches on a side stream queued behind a slow one, their inputs dropped: the
    sweeps the launches trigger must release none of them while the GPU has not run them.
    (On their own allocation stream a freed block is reused only by later work of that stream;
    from another stream, the default stream's allocations would take it at once.)"""
    x = ts.tensor(np.ones(N, np.float32), device="cuda")
    _compiled(x)
    count = 100                                     # > Holding.limit: several sweeps run
    rng = np.random.default_rng(3)
    values = [rng.standard_normal(N).astype(np.float32) for _ in range(count)]
    inputs = [ts.tensor(v, device="cuda") for v in values]
    outs = [ts.zeros(N, device="cuda") for _ in range(count)]
    slow = ts.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with ts.stream():
        spin(slow.partition((B,)), x, n=SLOW * 5)  # keeps the side stream busy for a while
        for i in range(count):
            scale(outs[i].partition((B,)), inputs[i], a=1.0)   # queued behind spin
    del inputs                                      # only the pending launches hold them now
    gc.collect()
    # On the default stream, which does not wait for the side stream: if the inputs' blocks
    # had been freed, these would take them and overwrite them before the launches read them.
    junk = [torch.full((N,), 3.0, device="cuda") for _ in range(count)]
    for i in range(count):
        np.testing.assert_array_equal(outs[i].numpy(), values[i])
    del junk
