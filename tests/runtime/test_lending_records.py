"""Lending's bookkeeping on the fresh-tensor launch path (issue 16): a partition records where
it was lent as a place (file, line) and its bytes only when some check asks (lender_of), and
giving it back drops the record, so partitioning the memory again builds no byte set. The
checks that read the records refuse exactly as before: class, message, the lending line and
the line of the refused call. Both CPU backends; oracles in NumPy."""
import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe.runtime.storage_state import StorageState

from runtime_helpers import assert_located, marker_line

HERE = __file__


@ts.kernel
def plus_one(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)


def test_giving_back_drops_the_lending_record():
    zt = torch.zeros(64)
    for _ in range(3):
        p = ts.from_torch(zt).partition((16,))
        p.unpartition()
    assert StorageState.of(zt)._lent == []          # nothing left for the next lending to look at


def test_fresh_launches_then_lent_bytes_are_refused(backend):
    xt, zt = torch.from_numpy(np.arange(64, dtype=np.float32)), torch.full((64,), np.nan)
    for _ in range(3):                                # the user-kernel loop: new handles every launch
        p = ts.from_torch(zt).partition((16,))
        plus_one(p, ts.from_torch(xt)).sync()
        p.unpartition()
    np.testing.assert_array_equal(zt.numpy(), xt.numpy() + 1.0)
    held = ts.from_torch(zt).partition((16,))  # held-here
    with pytest.raises(ts.OwnershipError) as e:
        ts.from_torch(zt).partition((16,))  # again-here
    assert e.value.message == (f"cannot partition this tensor: its bytes are lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'held-here')})")
    assert_located(e.value, HERE, "again-here")
    held.unpartition()
    p = ts.from_torch(zt).partition((16,))           # given back: lendable again
    plus_one(p, ts.from_torch(xt)).sync()
    p.unpartition()


def test_an_earlier_view_cannot_write_bytes_lent_later():
    t = ts.zeros(64)
    view = t[8:16]                                     # taken before the lending
    p = t.partition((16,))  # lent-here
    with pytest.raises(ts.OwnershipError) as e:
        view[0:2] = 1.0  # write-here
    assert e.value.message == (f"cannot write through `x[...] = value`: its bytes are lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'lent-here')})")
    assert_located(e.value, HERE, "write-here")
    assert (p.unpartition().numpy() == 0.0).all()     # refused: nothing written
    view[0:2] = 1.0                                    # given back: the view writes
    assert t.numpy()[8:10].tolist() == [1.0, 1.0]


def test_giving_back_one_partition_keeps_the_other_lent():
    t = ts.zeros(64)
    a = t[0:32].partition((16,))
    b = t[32:64].partition((16,))  # b-here
    a.unpartition()                                    # drops a's record only
    with pytest.raises(ts.OwnershipError) as e:
        t[40:42] = 1.0  # b-write
    assert e.value.message == (f"cannot write through `x[...] = value`: its bytes are lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'b-here')})")
    assert_located(e.value, HERE, "b-write")
    t[0:2] = 1.0                                       # a's bytes are free again
    assert b.unpartition().numpy().tolist() == [0.0] * 32
    assert t.numpy()[:3].tolist() == [1.0, 1.0, 0.0]


def test_objects_repeated_then_lent_are_refused(backend):
    x = ts.tensor(np.arange(64, dtype=np.float32))
    p = ts.full(64, np.nan).partition((16,))
    for _ in range(4):                                 # full path, layout cache, then a repeat plan
        plus_one(p, x).sync()
    assert plus_one._last_plan is not None and plus_one._last_plan.matches((p, x), {}, None, backend)
    lent = x.partition((16,))  # x-lent
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # x-call
    assert e.value.message == (f"cannot use `x`: this tensor is lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'x-lent')})")
    assert_located(e.value, HERE, "x-call")
    lent.unpartition()
    np.testing.assert_array_equal(p.unpartition().numpy(), np.arange(64, dtype=np.float32) + 1.0)
