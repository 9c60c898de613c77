"""The launch cache (runtime/launch_cache.py): a launch with the layout of an earlier one skips
the checks that layout decides, with new argument objects, and never lets through what a
fresh check refuses. Each refusal test makes two launches of identical layout that differ
only in aliasing, lending, initialisation, a torch version counter or a runtime scalar, and
expects the second refused exactly as a first launch would be: class, message, the line of
the call. Both CPU backends; oracles in NumPy."""
import numpy as np
import pytest
import torch

import tilesafe as ts

from runtime_helpers import assert_located, marker_line

HERE = __file__
PAD = -5.0


@ts.kernel
def plus_one(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)


@ts.kernel(sanitize=True)
def tile_at(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], start: int, N: int):
    z.store(ts.load(x, (start,), shape=(16,), padding=PAD))


@ts.kernel(preconditions=["scale_num >= 1"])
def scaled(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], scale_num: int, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * scale_num)


def _values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, n).astype(np.float32)


def _run_plus_one(x: ts.Tensor, n: int = 64) -> np.ndarray:
    p = ts.full(n, np.nan).partition((16,))
    plus_one(p, x).sync()
    return p.unpartition().numpy()


def test_new_objects_of_a_seen_layout_skip_the_full_checks(backend, binds):
    xs = [_values(64, s) for s in range(4)]
    outs = [_run_plus_one(ts.tensor(x)) for x in xs]             # new tensors and partitions each time
    for got, x in zip(outs, xs):
        np.testing.assert_allclose(got, x + 1.0, rtol=1e-6)
    assert binds[0] <= 1                                          # at most the first launch was checked in full
    np.testing.assert_allclose(_run_plus_one(ts.tensor(xs[0][:48]), 48), xs[0][:48] + 1.0, rtol=1e-6)
    assert binds[0] <= 2                                          # a new shape is a new layout


def test_torch_arguments_of_a_seen_layout_are_borrowed_each_call(backend, binds):
    for seed in range(3):
        x, z = torch.from_numpy(_values(64, seed)), torch.full((64,), float("nan"))
        plus_one(ts.from_torch(z).partition((16,)), x).sync()
        np.testing.assert_allclose(z.numpy(), x.numpy() + 1.0, rtol=1e-6)
    assert binds[0] <= 1


def test_an_alias_in_a_seen_layout_is_refused(backend):
    base = ts.tensor(_values(128, 1))
    z, x = base[0:64], base[64:128]
    p = z.partition((16,))
    plus_one(p, x).sync()                                         # disjoint halves of one storage: fine
    p.unpartition()
    z, x = base[0:64], base[32:96]                                # the same layout, now overlapping
    before = base.numpy()
    p = z.partition((16,))
    with pytest.raises(ts.AliasError) as e:
        plus_one(p, x)  # alias-call
    assert e.value.message == "output `z` of `plus_one` shares memory with argument `x`"
    assert_located(e.value, HERE, "alias-call")
    p.unpartition()
    np.testing.assert_array_equal(base.numpy(), before)          # refused: nothing written


def test_a_lent_ref_in_a_seen_layout_is_refused(backend):
    _run_plus_one(ts.tensor(_values(64, 2)))
    x = ts.tensor(_values(64, 3))
    lent = x.partition((16,))  # lent-here
    p = ts.zeros(64).partition((16,))
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # lent-call
    assert e.value.message.startswith("cannot use `x`: this tensor is lent to a partition (lent at ")
    assert f"test_launch_cache.py:{marker_line(HERE, 'lent-here')}" in e.value.message
    assert_located(e.value, HERE, "lent-call")
    lent.unpartition()
    plus_one(p, x).sync()                                         # given back: accepted again
    np.testing.assert_allclose(p.unpartition().numpy(), x.numpy() + 1.0, rtol=1e-6)


def test_an_unpartitioned_partition_in_a_seen_layout_is_refused(backend):
    _run_plus_one(ts.tensor(_values(64, 4)))
    x = ts.tensor(_values(64, 5))
    p = ts.zeros(64).partition((16,))
    p.unpartition()  # ended-here
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # ended-call
    assert e.value.message == f"this partition was unpartitioned at {HERE}:{marker_line(HERE, 'ended-here')}"
    assert_located(e.value, HERE, "ended-call")


def test_an_unwritten_input_in_a_seen_layout_is_refused(backend):
    _run_plus_one(ts.tensor(_values(64, 6)))
    x = ts.empty(64)                                              # same layout, never written
    p = ts.full(64, 7.0).partition((16,))
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # unwritten-call
    assert e.value.message == ("argument `x` of `plus_one` is read, but it came from ts.empty and has not "
                               "been written")
    assert_located(e.value, HERE, "unwritten-call")
    assert (p.unpartition().numpy() == 7.0).all()                # refused: nothing written
    x[16:] = 1.0                                                  # partly written is still refused
    with pytest.raises(ts.OwnershipError):
        plus_one(ts.zeros(64).partition((16,)), x)


def test_a_torch_write_to_lent_memory_in_a_seen_layout_is_refused(backend):
    x = ts.tensor(_values(64, 7))
    z = torch.zeros(64)
    p = ts.from_torch(z).partition((16,))
    plus_one(p, x).sync()
    p.unpartition()
    z2 = torch.zeros(64)
    p = ts.from_torch(z2).partition((16,))
    z2.add_(1.0)                                                  # torch writes memory tilesafe holds
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # version-call
    assert "was modified through torch while tilesafe held it" in e.value.message
    assert_located(e.value, HERE, "version-call")


def test_a_scalar_outside_the_proven_range_takes_the_masked_code(backend):
    x_host = np.arange(1, 65, dtype=np.float32)                   # 4 tiles of 16
    x = ts.tensor(x_host)
    for start in (0, 2, 3, 4, 7, 1, -1):                          # 4, 7 and -1 are past the tensor
        p = ts.full(16, np.nan).partition((16,))
        tile_at(p, x, start).sync()                               # the sanitizer refuses a maskless access outside
        want = x_host[start * 16:(start + 1) * 16] if 0 <= start < 4 else np.full(16, PAD, np.float32)
        np.testing.assert_array_equal(p.unpartition().numpy(), want)


def test_a_scalar_that_breaks_a_precondition_in_a_seen_layout_is_refused(backend):
    x_host = _values(64, 8)
    x = ts.tensor(x_host)
    p = ts.full(64, np.nan).partition((16,))
    scaled(p, x, 3).sync()
    np.testing.assert_allclose(p.unpartition().numpy(), x_host * 3, rtol=1e-6)
    p = ts.full(64, 9.0).partition((16,))
    with pytest.raises(ts.LaunchError) as e:
        scaled(p, x, 0)  # pre-call
    assert e.value.message == "precondition `scale_num >= 1` of `scaled` does not hold (scale_num = 0)"
    assert_located(e.value, HERE, "pre-call")
    assert (p.unpartition().numpy() == 9.0).all()


def test_a_passed_dimension_that_disagrees_in_a_seen_layout_is_refused(backend):
    x = ts.tensor(_values(64, 9))
    p = ts.zeros(64).partition((16,))
    plus_one(p, x, N=64).sync()
    p.unpartition()
    p = ts.zeros(64).partition((16,))
    with pytest.raises(ts.LaunchError) as e:
        plus_one(p, x, N=63)  # dim-call
    assert e.value.message == "`N` = 63 was passed, but dimension 0 of `x` is 64"
    assert_located(e.value, HERE, "dim-call")


def test_a_cached_layout_keeps_no_memory_alive(backend):
    import gc
    import weakref
    z = torch.zeros(64)
    x = ts.tensor(_values(64, 10))
    plus_one(ts.from_torch(z).partition((16,)), x).sync()
    plus_one(ts.from_torch(torch.zeros(64)).partition((16,)), x).sync()   # through the cache
    ref = weakref.ref(z)
    del z
    gc.collect()
    assert ref() is None


def test_objects_first_seen_through_the_cache_are_repeated_on_the_prepared_path(backend, binds):
    x = ts.tensor(_values(64, 11))
    _run_plus_one(ts.tensor(_values(64, 12)))                     # the layout is seen
    p = ts.full(64, np.nan).partition((16,))
    plus_one(p, x).sync()                                          # new objects: through the cache
    assert plus_one._last_plan is None or not plus_one._last_plan.matches((p, x), {}, None, backend)  # no plan object
    plus_one(p, x).sync()                                          # the same objects again: a plan for them
    assert plus_one._last_plan is not None and plus_one._last_plan.matches((p, x), {}, None, backend)
    plus_one(p, x).sync()                                          # and the prepared path
    np.testing.assert_allclose(p.unpartition().numpy(), x.numpy() + 1.0, rtol=1e-6)
    assert binds[0] <= 1
