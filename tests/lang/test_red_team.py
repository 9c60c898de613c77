"""Red-team regressions: safe kernels and host code that tilesafe once wrongly accepted."""

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.errors import OwnershipError


# S11: a narrowing cast wraps, so the bounds proof may not reuse the symbolic value of its
# operand. range(astype(200, i8), 1) starts at -56: the load must stay masked.
@ts.kernel(sanitize=True)
def _narrowed_lower_bound(z: ts.Mut[ts.f32, (4,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    acc = ts.zeros((4,), ts.f32)
    for i in range(ts.astype(s, ts.i8), 1):
        acc = acc + ts.load(x, (i,), shape=(4,))
    z.store(acc)


def test_narrowing_cast_does_not_carry_a_bounds_proof():
    x = ts.tensor(np.arange(1024, dtype=np.float32))
    z = ts.empty(4)
    p = z.partition((4,))
    report = _narrowed_lower_bound.checks(p, x, s=200)
    assert "load x: kernel" in str(report)
    _narrowed_lower_bound(p, x, s=200).sync()   # sanitized: an unmasked OOB access would raise
    np.testing.assert_array_equal(p.unpartition().numpy(), [0, 1, 2, 3])


# S14: an unwritten ts.empty handed to torch and borrowed back unwritten is still unwritten.
def test_empty_round_trip_through_torch_stays_unwritten():
    t = ts.empty(16)
    back = ts.from_torch(t.to_torch())
    with pytest.raises(OwnershipError, match="has not been written"):
        back.numpy()


@ts.kernel
def _copy(z: ts.Mut[ts.f32, (4,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    z.store(ts.load_tile_like(x, z))


def test_empty_handed_to_torch_is_not_a_readable_ref():
    shared = ts.empty(16).to_torch()
    with pytest.raises(OwnershipError, match="has not been written"):
        _copy(ts.zeros(16).partition((4,)), shared)


def test_empty_filled_by_torch_after_hand_over_is_written():
    shared = ts.empty(4).to_torch()
    shared.fill_(2.0)
    np.testing.assert_array_equal(ts.from_torch(shared).numpy(), [2, 2, 2, 2])


# S8: lending is per handle, so a view made before `partition` still writes the lent bytes
# (and can partition them a second time). Ordering (S9/S10) keeps it race-free, but the
# "one writable handle" rule is broken. Fixing it needs lending tracked per storage byte
# range in StorageState rather than per Tensor handle.
def test_view_made_before_lending_cannot_write_the_lent_bytes():
    z = ts.zeros(16)
    v, other = z[:], z[8:]
    p = z.partition((4,))
    with pytest.raises(OwnershipError, match="lent to a partition"):
        v[0] = 3.0
    with pytest.raises(OwnershipError, match="lent to a partition"):
        other.to_torch()
    assert float(v.numpy()[0]) == 0.0      # reading through another handle stays allowed (S9 orders it)
    p.unpartition()
    v[0] = 3.0                             # given back: writable again
    assert float(z.numpy()[0]) == 3.0


def test_second_partition_through_an_older_view_is_refused():
    z = ts.zeros(16)
    v, disjoint = z.view(16), ts.zeros(32)[16:]
    p = z.partition((4,))
    with pytest.raises(OwnershipError, match="lent to a partition"):
        v.partition((4,))
    with pytest.raises(OwnershipError, match="lent to a partition"):
        v[4:8].partition_prefix((4,))
    q = disjoint.partition((4,))           # other bytes: fine
    p.unpartition(), q.unpartition()
    v.partition((4,)).unpartition()
