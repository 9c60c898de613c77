"""Negative and positive tests for the memory rules checked at launch and on the host:
S7 (no aliasing), S8 (partitions lend exclusively), S14 (no read of unwritten memory)."""
import numpy as np
import pytest
import torch
from lang_helpers import launch, marker_line, poisoned, rand

import tilesafe as ts

HERE = __file__


@ts.kernel
def scaled(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 3.0)


@ts.kernel
def two_outputs(z: ts.Mut[ts.f32, ("B",)], w: ts.Mut[ts.f32, ("B",)], B: ts.Const[int]):
    z.store(ts.full((B,), 1.0, ts.f32))
    w.store(ts.full((B,), 2.0, ts.f32))


@ts.kernel
def accumulate(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(z.load() + ts.load_tile_like(x, z))


# --- S7: no aliasing ------------------------------------------------------------------------
def test_output_aliasing_an_input_through_a_view_of_the_same_tensor():
    base, poison = poisoned(64, "f32", 5.0)
    same = base[:]                       # another handle to the same bytes
    p = base.partition((16,))
    with pytest.raises(ts.AliasError) as ei:
        scaled(p, same)
    assert "output `z` of `scaled` shares memory with argument `x`" in ei.value.message
    assert str(ei.value).startswith("error: ") and "help:" in str(ei.value)
    assert np.array_equal(p.unpartition().numpy(), poison)


@pytest.mark.parametrize("out,inp", [((0, 64), (32, 96)), ((32, 96), (0, 33)), ((10, 20), (0, 128))])
def test_overlapping_slices_are_refused(out, inp):
    base, poison = poisoned(128, "f32", 5.0)
    o, i = base[out[0]:out[1]], base[inp[0]:inp[1]]
    p = o.partition((16,))
    with pytest.raises(ts.AliasError, match="shares memory with argument `x`"):
        scaled(p, i)
    p.unpartition()
    assert np.array_equal(base.numpy(), poison)


def test_overlapping_strided_views_are_refused():
    base, _ = poisoned((8, 8), "f32", 5.0)
    col = base[:, 2]                      # stride 8
    diag_ish = base.reshape(64)[2::8]     # the same elements through another view
    with pytest.raises(ts.AliasError):
        scaled(col.partition((4,)), diag_ish)


def test_disjoint_slices_of_one_storage_are_accepted(backend):
    host = rand(np.random.default_rng(120), 128, "f32")
    base = ts.tensor(host)
    got = launch(scaled, base[0:64], (16,), base[64:128])
    assert np.array_equal(got, host[64:] * 3)
    assert np.array_equal(base.numpy(), np.concatenate([host[64:] * 3, host[64:]]))


def test_interleaved_strided_views_are_disjoint(backend):
    host = rand(np.random.default_rng(121), 100, "f32")
    base = ts.tensor(host)
    got = launch(scaled, base[0::2], (16,), base[1::2])     # even elements <- 3 * odd elements
    assert np.array_equal(got, host[1::2] * 3)


def test_stride_zero_output_is_refused():
    t = torch.full((1,), 7.0).expand(64)                     # 64 elements, one address
    z = ts.from_torch(t)
    with pytest.raises(ts.AliasError) as ei:
        scaled(z.partition((16,)), ts.tensor(np.ones(64, np.float32) * 2))
    assert "overlaps itself" in ei.value.message
    assert float(t[0]) == 7.0


def test_two_outputs_sharing_bytes_are_refused():
    base, poison = poisoned(64, "f32", 5.0)
    first = base[0:32].partition((16,))
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):   # S8 by bytes, before any launch
        base[16:48].partition((16,))
    first.unpartition()
    assert np.array_equal(base.numpy(), poison)


# --- S8: partitions lend exclusively -------------------------------------------------------------
def test_using_a_tensor_while_lent():
    z = ts.zeros(64)
    p = z.partition((16,))  # LENT-HERE
    for use in (lambda: z.numpy(), lambda: z.shape, lambda: z[0:4], lambda: scaled(ts.empty(64).partition((16,)), z)):
        with pytest.raises(ts.OwnershipError) as ei:
            use()
        assert "lent to a partition" in ei.value.message
        assert f"{HERE}:{marker_line(HERE, 'LENT-HERE')}" in ei.value.message
    p.unpartition()


def test_a_second_partition_while_lent():
    z = ts.zeros(64)
    p = z.partition((16,))
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        z.partition((32,))
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        z.partition_prefix((16,))
    assert p.unpartition() is z
    z.partition((32,)).unpartition()


def test_using_a_partition_after_unpartition():
    x = ts.tensor(rand(np.random.default_rng(122), 64, "f32"))
    z = ts.zeros(64)
    p = z.partition((16,))
    assert p.unpartition() is z
    with pytest.raises(ts.OwnershipError, match="this partition was unpartitioned at"):
        scaled(p, x)
    with pytest.raises(ts.OwnershipError):
        p.grid
    with pytest.raises(ts.OwnershipError):
        p.unpartition()
    assert (z.numpy() == 0).all()


def test_unpartition_returns_the_same_object_with_the_results(backend):
    x = rand(np.random.default_rng(123), 40, "f32")
    z = ts.empty(40)
    p = z.partition((16,))
    out = scaled(p, ts.tensor(x)).sync()
    assert out is p
    back = out.unpartition()
    assert back is z and np.array_equal(z.numpy(), x * 3)


# --- S14: no read of unwritten memory -------------------------------------------------------
def test_reading_an_empty_output_through_load_is_refused():
    z = ts.empty(64)
    p = z.partition((16,))
    with pytest.raises(ts.OwnershipError) as ei:
        accumulate(p, ts.tensor(np.ones(64, np.float32)))
    assert "argument `z` of `accumulate` is read, but it came from ts.empty" in ei.value.message
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        p.unpartition().numpy()


def test_reading_an_empty_tensor_as_a_ref_is_refused():
    x = ts.empty(64)
    with pytest.raises(ts.OwnershipError, match="argument `x` of `scaled` is read, but it came from ts.empty"):
        scaled(ts.empty(64).partition((16,)), x)


def test_reading_an_empty_tensor_from_the_host_is_refused():
    x = ts.empty((4, 8))
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        x.numpy()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        x[1].numpy()


def test_reads_are_accepted_after_a_covering_launch(backend):
    rng = np.random.default_rng(124)
    x = rand(rng, 50, "f32")
    y = ts.empty(50)
    launch(scaled, y, (16,), ts.tensor(x))                            # y is written by a launch
    y3 = x * np.float32(3)
    assert np.array_equal(y.numpy(), y3)
    z = ts.empty(50)
    assert np.array_equal(launch(scaled, z, (16,), y), y3 * np.float32(3))            # y read as a Ref
    assert np.array_equal(launch(accumulate, z, (16,), y), y3 * np.float32(3) + y3)   # z read via z.load()


def test_reads_are_accepted_after_a_host_write(backend):
    x = ts.empty(32)
    x[0:16] = np.arange(16, dtype=np.float32)
    with pytest.raises(ts.OwnershipError):
        x.numpy()
    x[16:32] = np.arange(16, 32, dtype=np.float32)
    assert np.array_equal(launch(scaled, ts.empty(32), (16,), x), np.arange(32, dtype=np.float32) * 3)


@ts.kernel
def conditional(z: ts.Mut[ts.f32, ("B",)], flag: int, B: ts.Const[int]):
    if flag > 0:
        z.store(ts.full((B,), 1.0, ts.f32))


def test_a_store_that_may_not_run_does_not_initialise(backend):
    z = ts.empty(32)
    p = z.partition((16,))
    conditional(p, 1).sync()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        p.unpartition().numpy()


def test_two_handles_from_one_torch_tensor_alias():
    t = torch.arange(64, dtype=torch.float32)
    a, b = ts.from_torch(t), ts.from_torch(t)            # tracked by bytes, not by handle
    with pytest.raises(ts.AliasError, match="shares memory with argument `x`"):
        scaled(a.partition((16,)), b)
    assert torch.equal(t, torch.arange(64, dtype=torch.float32))


def test_a_written_slice_of_an_empty_tensor_is_readable_but_not_the_rest(backend):
    e = ts.empty(64)
    e[0:32] = np.arange(32, dtype=np.float32)
    assert np.array_equal(launch(scaled, ts.empty(32), (16,), e[0:32]), np.arange(32, dtype=np.float32) * 3)
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        scaled(ts.empty(32).partition((16,)), e[16:48])


@ts.kernel
def store_then_reload(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)
    z.store(z.load() + 1.0)          # reads what this block just wrote (S15)


@ts.kernel
def reload_then_store(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    t = z.load()
    z.store(t + ts.load_tile_like(x, z))


def test_reading_back_a_tile_the_block_already_wrote_needs_no_initialised_output(backend):
    x = np.random.default_rng(11).standard_normal(70).astype(np.float32)
    out = store_then_reload(ts.empty(70).partition((32,)), ts.tensor(x)).sync().unpartition()
    np.testing.assert_allclose(out.numpy(), x * 2 + 1, rtol=1e-6)
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        reload_then_store(ts.empty(70).partition((32,)), ts.tensor(x))
