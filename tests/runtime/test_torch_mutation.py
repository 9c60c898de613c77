"""S13, best-effort: torch writing a borrowed tensor while it is lent to a partition is reported."""
import sys
import warnings

import numpy as np
import pytest
import torch

import tilesafe as ts


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


@ts.kernel
def inc(z: ts.Mut[ts.f32, ("B",)], B: ts.Const[int]):
    z.store(z.load() + 1.0)


def test_torch_write_while_partitioned_is_reported_at_launch_and_unpartition():
    t = torch.arange(64, dtype=torch.float32)
    p = ts.from_torch(t).partition((32,))
    with ts.backend("reference"):
        inc(p).sync()
        inc(p).sync()                  # the launch plan's fast path
        t.add_(100.0)                  # torch writes the lent memory behind tilesafe's back
        with pytest.raises(ts.OwnershipError, match="modified through torch"):
            inc(p)
        with pytest.raises(ts.OwnershipError, match="modified through torch"):
            inc(p)                     # every byte of the storage is lent: refused until given back
    with pytest.warns(RuntimeWarning, match="modified through torch") as seen:
        x = p.unpartition(); line = here()     # always gives the tensor back (issue 15 item 7)
    assert x._torch() is not None and seen[0].filename == __file__ and seen[0].lineno == line
    np.testing.assert_array_equal(x.numpy(), np.arange(64, dtype=np.float32) + 102)


def test_torch_write_to_bytes_that_are_not_lent_is_a_warning_naming_the_tensor_once(backend):
    t = torch.zeros(96)
    whole = ts.from_torch(t)
    p = whole[:64].partition((32,))
    inc(p).sync()
    t[64:].add_(5.0)                   # torch writes bytes the partition does not hold
    with pytest.warns(RuntimeWarning) as seen:
        inc(p).sync(); line = here()   # a launch is not refused: the counter cannot say which bytes moved
    assert len(seen) == 1 and seen[0].filename == __file__ and seen[0].lineno == line
    message = str(seen[0].message)
    assert "(64,) float32 tensor lent to this partition (at " in message and "only part of that storage" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inc(p).sync()                  # reported once per move of the counter
        x = p.unpartition()
    expected = np.concatenate([np.full(64, 3.0), np.full(32, 5.0)]).astype(np.float32)
    np.testing.assert_array_equal(ts.from_torch(t).numpy(), expected)
    assert x.shape == (64,)


def test_unpartition_gives_back_a_partly_lent_tensor_after_a_torch_write(backend):
    t = torch.zeros(96)
    p = ts.from_torch(t)[32:].partition((32,))
    t[:32].fill_(1.0)                  # before the fix this made the partition impossible to give back
    with pytest.warns(RuntimeWarning, match="only part of that storage is lent"):
        x = p.unpartition()
    x[:] = 2.0                         # usable again
    np.testing.assert_array_equal(t.numpy(), np.r_[np.ones(32), np.full(64, 2.0)].astype(np.float32))


def test_torch_write_after_unpartition_and_tilesafe_host_writes_are_fine():
    t = torch.zeros(96)
    whole = ts.from_torch(t)
    x, rest = whole[:64], whole[64:]
    p = x.partition((32,))
    rest[:] = np.full(32, 5.0, np.float32)    # tilesafe's own write to other bytes: not torch's
    with ts.backend("reference"):
        inc(p).sync()
    x = p.unpartition()
    t.mul_(2.0)                               # not lent any more: ordinary interop
    expected = np.concatenate([np.full(64, 2.0), np.full(32, 10.0)]).astype(np.float32)
    np.testing.assert_array_equal(ts.from_torch(t).numpy(), expected)
