"""`ts.distributed`: collectives go through the launch bookkeeping (S8, S9, S14) on gloo.

Most rules are checked in this process with a one-rank gloo group. Ordering needs a
collective that is really pending, so one test adds a second rank (a spawned process) that
joins each collective late, and this process, rank 0, checks what its host reads and
launches do meanwhile.
"""
import datetime
import socket
import sys
import traceback

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tilesafe as ts
from tilesafe.runtime.distributed import DistributedError


def here() -> int:
    return sys._getframe(1).f_lineno


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


def test_no_process_group_is_refused_at_the_call():
    assert not dist.is_initialized()
    x = ts.tensor(np.arange(3, dtype=np.float32))
    line = here() + 2
    with pytest.raises(DistributedError) as info:
        ts.distributed.all_reduce(x)
    assert "no torch.distributed process group is initialised" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    yield
    dist.destroy_process_group()


def test_one_rank_collectives_keep_values_and_mark_written(one_rank):
    x = ts.tensor(np.array([1.5, -2.0, 3.25], dtype=np.float32))
    assert ts.distributed.all_reduce(x).sync() is x
    np.testing.assert_array_equal(x.numpy(), [1.5, -2.0, 3.25])
    out = ts.empty(3)                          # S14: written by the gather, then readable
    ts.distributed.all_gather(x, out=out).sync()
    np.testing.assert_array_equal(out.numpy(), [1.5, -2.0, 3.25])
    t = torch.tensor([[4.0, 5.0]])             # torch tensors are borrowed
    gathered = ts.distributed.all_gather(t).sync()
    assert torch.equal(gathered, t)
    ts.distributed.broadcast(t, src=0).sync()
    assert ts.distributed.world_size() == 1 and ts.distributed.rank() == 0


def test_reading_an_unwritten_tensor_is_refused(one_rank):
    x = ts.empty(4)
    line = here() + 2
    with pytest.raises(ts.OwnershipError) as info:
        ts.distributed.all_reduce(x)
    assert "all_reduce reads a tensor that came from ts.empty and has not been written" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_a_tensor_lent_to_a_partition_is_refused(one_rank):
    x = ts.zeros(8)
    p = x.partition((4,))
    line = here() + 2
    with pytest.raises(ts.OwnershipError) as info:
        ts.distributed.all_reduce(x)
    assert "this tensor is lent to a partition" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    p.unpartition()
    ts.distributed.all_reduce(x).sync()        # given back: accepted


def test_a_collective_that_writes_frozen_memory_is_refused(one_rank):
    w = ts.freeze(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    line = here() + 2
    with pytest.raises(ts.OwnershipError) as info:
        ts.distributed.all_reduce(w[1:3])
    assert "cannot pass it to all_reduce: its bytes are frozen (ts.freeze)" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    ts.distributed.broadcast(w, src=0).sync()       # the source rank only reads it
    out = ts.zeros(4)
    ts.distributed.all_gather(w, out=out).sync()     # read as before
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0, 4.0])


def test_all_gather_out_of_the_wrong_shape_is_refused(one_rank):
    x = ts.zeros(4)
    line = here() + 2
    with pytest.raises(DistributedError) as info:
        ts.distributed.all_gather(x, out=ts.zeros(8))
    assert "`out` must be (4,)" in info.value.message
    assert info.value.loc.file == __file__ and info.value.loc.line == line


# -- two ranks: a collective that is still pending -----------------------------------------------

STRICT_READ, STRICT_WRITE, STRICT_LAUNCH = "strict read", "strict write", "strict launch"


def _rank_main(rank: int, init: str, results) -> None:
    try:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=60))
        results.put(_scenario(rank))
    except BaseException:
        results.put(traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _scenario(rank: int) -> dict:
    import time
    seen = {}
    x = ts.tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32) * (rank + 1))
    if rank == 1:
        time.sleep(1.5)                        # rank 0's collective stays pending meanwhile
        ts.distributed.all_reduce(x).sync()
    else:
        ts.distributed.all_reduce(x, async_op=True)
        with ts.strict_sync():                 # an implicit wait on the pending collective is refused
            try:
                x.numpy()
            except ts.OwnershipError as e:
                seen[STRICT_READ] = (e.message, e.loc.line, here() - 2)
            try:
                x[0] = 5.0
            except ts.OwnershipError as e:
                seen[STRICT_WRITE] = (e.message, e.loc.line, here() - 2)
            try:
                double(ts.empty(3).partition((2,)), x)
            except ts.OwnershipError as e:
                seen[STRICT_LAUNCH] = (e.message, e.loc.line, here() - 2)
        # A launch waits for it (S9 on the CPU): it reads the sum, not rank 0's own values.
        seen["launch"] = double(ts.empty(3).partition((2,)), x).sync().unpartition().numpy().tolist()
    seen["sum"] = x.numpy().tolist()
    y = ts.tensor(np.array([float(rank)] * 2, dtype=np.float32))
    if rank == 1:
        time.sleep(0.5)
    seen["gather"] = ts.distributed.all_gather(y, async_op=True).sync().numpy().tolist() if rank == 0 else \
        ts.distributed.all_gather(y).sync().numpy().tolist()
    z = torch.full((2,), 7.0) if rank == 1 else torch.zeros(2)
    ts.distributed.broadcast(z, src=1).sync()
    seen["broadcast"] = z.tolist()
    return seen


def test_two_ranks_order_host_reads_and_launches_after_a_pending_collective():
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init = f"tcp://127.0.0.1:{free_port()}"
    other = ctx.Process(target=_rank_main, args=(1, init, results), daemon=True)
    other.start()
    try:
        dist.init_process_group("gloo", init_method=init, rank=0, world_size=2,
                                timeout=datetime.timedelta(seconds=60))
        zero = _scenario(0)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    one = results.get(timeout=60)
    other.join(timeout=30)
    assert isinstance(one, dict), one
    message, line, want = zero[STRICT_READ]
    assert "an implicit wait on pending device work was needed for `numpy()`" in message and line == want
    message, line, want = zero[STRICT_WRITE]
    assert "an implicit wait on pending device work was needed for `x[...] = value`" in message and line == want
    message, line, want = zero[STRICT_LAUNCH]
    assert "an implicit wait on pending device work was needed for `double`" in message and line == want
    assert zero["launch"] == [6.0, 12.0, 18.0]                 # 2 * (x0 + x1)
    assert zero["sum"] == one["sum"] == [3.0, 6.0, 9.0]
    assert zero["gather"] == one["gather"] == [0.0, 0.0, 1.0, 1.0]
    assert zero["broadcast"] == one["broadcast"] == [7.0, 7.0]
