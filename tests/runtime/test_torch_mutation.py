"""S13, best-effort: torch writing a borrowed tensor while it is lent to a partition is reported."""
import numpy as np
import pytest
import torch

import tilesafe as ts


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
        p.unpartition()


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
