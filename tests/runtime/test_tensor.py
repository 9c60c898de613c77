"""Host tensors: constructors, views, host reads and writes against NumPy; S9 and S13."""
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

from tilesafe import dtypes
from tilesafe.errors import AliasError, LaunchError, OwnershipError, TileSafeError
from tilesafe.runtime.constructors import (arange, empty, from_torch, full, ones, rand, randn,
                                           tensor, zeros)
from tilesafe.runtime.storage_state import StorageState
from tilesafe.runtime.tensor import Tensor
from tilesafe.settings import strict_sync


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def sample(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- constructors ------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [dtypes.f32, dtypes.f16, dtypes.bf16, dtypes.f8e4m3fn, dtypes.f8e5m2,
                                dtypes.i8, dtypes.i32, dtypes.i64, dtypes.u8, dtypes.bool_])
def test_zeros_ones_full_match_numpy_in_every_dtype(dt):
    assert zeros((2, 3), dt).dtype is dt
    np.testing.assert_array_equal(zeros((2, 3), dt).numpy(), np.zeros((2, 3), dt.np))
    np.testing.assert_array_equal(ones(5, dt).numpy(), np.ones(5, dt.np))
    np.testing.assert_array_equal(full((4,), 3, dt).numpy(), np.full(4, 3, dt.np))


def test_shapes_int_or_tuple_and_dtype_spellings():
    assert zeros(4).shape == (4,)
    assert zeros((2, 0, 3)).shape == (2, 0, 3)
    assert zeros(()).shape == ()
    assert zeros(3, "bf16").dtype is dtypes.bf16
    assert zeros(3, np.int16).dtype is dtypes.i16
    assert zeros(3, torch.float16).dtype is dtypes.f16
    assert zeros(3, device="cpu").device == "cpu"
    assert zeros(3).device == ("cuda:0" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_host_casts_to_fp8_saturate_like_the_gpu_on_every_device(device):
    as_f32 = lambda t: t.numpy().astype(np.float32)
    np.testing.assert_array_equal(as_f32(full(2, 1000.0, dtypes.f8e4m3fn, device)), [448, 448])
    np.testing.assert_array_equal(as_f32(full(1, -1e6, dtypes.f8e5m2, device)), [-57344])
    values = np.array([1e4, -1e4, 1.5, np.nan], np.float32)
    np.testing.assert_array_equal(as_f32(tensor(values, dtypes.f8e4m3fn, device)), [448, -448, 1.5, np.nan])
    t = zeros(4, dtypes.f8e4m3fn, device)
    t[:] = values
    np.testing.assert_array_equal(as_f32(t), [448, -448, 1.5, np.nan])


def test_arange_matches_numpy():
    np.testing.assert_array_equal(arange(7).numpy(), np.arange(7, dtype=np.int32))
    np.testing.assert_array_equal(arange(3, 11, 2, dtype=dtypes.i64).numpy(), np.arange(3, 11, 2))
    np.testing.assert_array_equal(arange(2, 6, dtype=dtypes.bf16).numpy(),
                                  np.arange(2, 6).astype(ml_dtypes.bfloat16))
    assert arange(7).dtype is dtypes.i32


@pytest.mark.parametrize("dt", [dtypes.f32, dtypes.f16, dtypes.bf16, dtypes.f8e4m3fn, dtypes.f8e5m2, dtypes.f64])
def test_rand_is_uniform_in_unit_interval_and_seeded(dt):
    a = rand((64, 64), dt, seed=3).numpy().astype(np.float64)
    assert a.min() >= 0.0 and a.max() < 1.0
    assert 0.4 < a.mean() < 0.6
    np.testing.assert_array_equal(a, rand((64, 64), dt, seed=3).numpy().astype(np.float64))
    assert not np.array_equal(a, rand((64, 64), dt, seed=4).numpy().astype(np.float64))


def test_randn_statistics_and_seed():
    a = randn(20000, seed=1).numpy()
    assert abs(a.mean()) < 0.05 and abs(a.std() - 1) < 0.05
    np.testing.assert_array_equal(a, randn(20000, seed=1).numpy())
    assert randn(4, dtypes.bf16, seed=1).dtype is dtypes.bf16


@pytest.mark.parametrize("np_dtype", [np.float32, np.float16, np.float64, np.int8, np.int32,
                                      np.int64, np.uint8, np.bool_, ml_dtypes.bfloat16,
                                      ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_tensor_round_trips_numpy_bit_exactly(np_dtype):
    a = sample((3, 5)).astype(np_dtype)
    t = tensor(a)
    assert t.dtype is dtypes.from_numpy(np_dtype)
    back = t.numpy()
    assert back.dtype == np.dtype(np_dtype)
    np.testing.assert_array_equal(back.view(np.uint8), np.ascontiguousarray(a).view(np.uint8))


def test_tensor_copies_its_input():
    a = sample(6)
    t = tensor(a)
    a[:] = 0
    assert not np.all(t.numpy() == 0)
    src = torch.arange(4.0)
    u = tensor(src)
    src.zero_()
    np.testing.assert_array_equal(u.numpy(), [0, 1, 2, 3])


def test_tensor_dtype_defaults_follow_torch_for_python_data():
    assert tensor([1.5, 2.0]).dtype is dtypes.f32
    assert tensor([[1, 2], [3, 4]]).dtype is dtypes.i64
    assert tensor([True, False]).dtype is dtypes.bool_
    assert tensor(np.ones(2)).dtype is dtypes.f64               # arrays keep their dtype
    assert tensor(2.5).shape == ()
    np.testing.assert_array_equal(tensor([[1, 2]], dtype=dtypes.f16).numpy(), np.array([[1, 2]], np.float16))


def test_tensor_of_a_strided_numpy_array_and_of_a_tilesafe_tensor():
    a = sample((6, 8))[::2, 1::3]
    np.testing.assert_array_equal(tensor(a).numpy(), a)
    t = tensor(a)
    c = tensor(t.T, dtype=dtypes.f64)
    np.testing.assert_array_equal(c.numpy(), a.T.astype(np.float64))
    assert c.is_contiguous()


def test_from_torch_shares_storage_both_ways():
    src = torch.arange(12.0).view(3, 4)
    t = from_torch(src)
    src[0, 0] = 100.0
    assert t.numpy()[0, 0] == 100.0
    t[1, 1] = -5.0
    assert src[1, 1].item() == -5.0
    assert t._torch().data_ptr() == src.data_ptr()


def test_from_torch_of_a_view_finds_the_same_storage_state():
    src = torch.zeros(10)
    assert from_torch(src[2:])._state is from_torch(src)._state


def test_from_torch_keeps_the_memory_alive():
    t = from_torch(torch.arange(1000.0)[10:20])
    import gc
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(10.0, 20.0, dtype=np.float32))


@pytest.mark.parametrize("make, fragment", [
    (lambda: zeros((2, -1)), "negative dimension"),
    (lambda: zeros(2.5), "a shape is an int or a tuple of ints"),
    (lambda: zeros(3, dtype="float128"), "is not a tilesafe dtype"),
    (lambda: empty(3, dtype=np.complex64), "is not a tilesafe dtype"),
    (lambda: rand(3, dtype=dtypes.i32), "ts.rand makes floating-point values"),
    (lambda: zeros(3, device="tpu"), "is not a device tilesafe supports"),
    (lambda: tensor(np.zeros(3, np.complex64)), "cannot make a tensor from ndarray"),
    (lambda: tensor(np.zeros(3, np.uint16)), "cannot make a tensor from ndarray"),
    (lambda: from_torch(np.zeros(3)), "ts.from_torch takes a torch.Tensor"),
    (lambda: from_torch(torch.zeros(3, dtype=torch.complex64)), "is not a tilesafe dtype"),
])
def test_bad_constructor_input_is_a_launch_error_with_help(make, fragment):
    with pytest.raises(LaunchError) as info:
        make()
    assert fragment in info.value.message
    assert info.value.help


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only fallback")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(LaunchError, match="CUDA is not available"):
        zeros(3, device="cuda")


# -- metadata ------------------------------------------------------------------------------

def test_metadata_matches_numpy():
    a = sample((4, 6))
    t = tensor(a)[1:, ::2]
    view = a[1:, ::2]
    assert t.shape == view.shape and t.ndim == 2 and t.numel == view.size
    assert t.strides == tuple(s // 4 for s in view.strides)
    assert t.nbytes == view.nbytes and t.dtype is dtypes.f32
    assert not t.is_contiguous() and tensor(a).is_contiguous()
    assert len(t) == 3
    np.testing.assert_array_equal(np.stack([row.numpy() for row in t]), view)
    np.testing.assert_array_equal(np.asarray(t), view)


def test_len_of_a_scalar_tensor_is_an_error():
    with pytest.raises(TileSafeError, match="len\\(\\) of a 0-d tensor"):
        len(zeros(()))


def test_tensors_hash_by_identity():
    a, b = zeros(3), zeros(3)
    assert len({a, b, a}) == 2
    assert {a: 1}[a] == 1 and a != b


def test_repr_and_str_show_values():
    t = tensor(np.array([1.5, -2.0], np.float32))
    assert "[ 1.5, -2. ]" in repr(t) and "dtype=ts.f32" in repr(t)
    assert str(t) == repr(t)


# -- views -----------------------------------------------------------------------------------

@pytest.mark.parametrize("index", [1, -1, (1, 2), slice(1, 3), (slice(None), 2), (Ellipsis, slice(0, 5, 2)),
                                   (None, 1), (slice(2, None), slice(None, None, 3))])
def test_basic_indexing_matches_numpy_and_shares_storage(index):
    a = sample((4, 6))
    t = tensor(a)
    view = t[index]
    np.testing.assert_array_equal(view.numpy(), a[index])
    assert view._state is t._state
    view.copy_(np.full(a[index].shape, 7.0, np.float32))
    a[index] = 7.0
    np.testing.assert_array_equal(t.numpy(), a)


def test_view_reshape_permute_transpose_match_numpy():
    a = sample((2, 3, 4))
    t = tensor(a)
    np.testing.assert_array_equal(t.view(6, 4).numpy(), a.reshape(6, 4))
    np.testing.assert_array_equal(t.reshape((4, -1)).numpy(), a.reshape(4, -1))
    np.testing.assert_array_equal(t.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.permute((-1, 0, 1)).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.transpose(0, 2).numpy(), a.swapaxes(0, 2))
    np.testing.assert_array_equal(t.view(6, 4).T.numpy(), a.reshape(6, 4).T)
    for v in (t.view(24), t.reshape(4, 6), t.permute(1, 0, 2), t.transpose(0, 1)):
        assert v._state is t._state and v._torch().data_ptr() == t._torch().data_ptr()


def test_writes_through_a_view_are_seen_by_the_base():
    t = zeros((4, 4))
    t.view(16)[5] = 3.0
    t.T[0, 3] = 2.0
    expected = np.zeros((4, 4), np.float32)
    expected[1, 1] = 3.0
    expected[3, 0] = 2.0
    np.testing.assert_array_equal(t.numpy(), expected)


@pytest.mark.parametrize("make, fragment", [
    (lambda t: t.T.reshape(12), "without copying"),
    (lambda t: t.view(5, 2), "cannot view 12 elements to shape (5, 2)"),
    (lambda t: t.reshape(-1, -1), "has more than one -1"),
    (lambda t: t.view(2.0, 6), "view takes ints"),
    (lambda t: t.permute(0, 0), "is not a permutation"),
    (lambda t: t.permute(0, 2), "is not a permutation"),
    (lambda t: t.transpose(0, 3), "cannot transpose axes 0 and 3"),
    (lambda t: t[0].T, ".T needs a 2-D tensor"),
    (lambda t: t[[0, 1]], "advanced indexing with list"),
    (lambda t: t[np.array([0])], "advanced indexing with ndarray"),
    (lambda t: t[t], "advanced indexing with Tensor"),
    (lambda t: t[True], "advanced indexing with bool"),
    (lambda t: t[::-1], "slice step must be positive"),
    (lambda t: t[0.5:], "slice bounds must be ints"),
    (lambda t: t[3], "index 3 is out of range for shape (3, 4)"),
    (lambda t: t[0, 0, 0], "out of range"),
    (lambda t: t[torch.tensor([0])], "advanced indexing with Tensor"),
])
def test_bad_views_are_tilesafe_errors_with_help(make, fragment):
    t = tensor(sample((3, 4)))
    with pytest.raises(TileSafeError) as info:
        make(t)
    assert fragment in info.value.message
    assert info.value.help
    assert info.value.loc.file == __file__


# -- host writes ---------------------------------------------------------------------------

def test_setitem_and_copy_match_numpy_with_broadcasting():
    a = sample((4, 5))
    t = tensor(a)
    t[1] = 2.5
    a[1] = 2.5
    t[:, 3] = np.arange(4, dtype=np.float64)
    a[:, 3] = np.arange(4)
    t[2:, :2] = [[1, 2], [3, 4]]
    a[2:, :2] = [[1, 2], [3, 4]]
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.copy_(np.arange(5, dtype=np.float32)) is t
    np.testing.assert_array_equal(t.numpy(), np.broadcast_to(np.arange(5, dtype=np.float32), (4, 5)))


def test_host_writes_round_like_ml_dtypes():
    values = sample(100, np.float32)
    t = zeros(100, dtypes.bf16)
    t[:] = values
    np.testing.assert_array_equal(t.numpy(), values.astype(ml_dtypes.bfloat16))


def test_setitem_from_an_overlapping_view_of_itself_behaves_like_numpy():
    a = np.arange(10, dtype=np.float32)
    t = tensor(a)
    t[1:] = t[:-1]
    a[1:] = a[:-1].copy()
    np.testing.assert_array_equal(t.numpy(), a)


def test_setitem_with_a_wrong_shape_is_refused_and_writes_nothing():
    t = zeros((2, 3))
    with pytest.raises(TileSafeError, match="cannot write a value of shape \\(2,\\) into shape \\(2, 3\\)"):
        t[:] = np.ones(2)
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3)))


def test_writing_through_a_self_overlapping_view_is_an_alias_error():
    t = from_torch(torch.zeros(1).expand(4))
    with pytest.raises(AliasError, match="elements share bytes"):
        t.copy_(np.arange(4))


def test_setitem_with_an_unsupported_value_is_an_error():
    with pytest.raises(TileSafeError, match="cannot write str"):
        zeros(3)[0] = "abc"


# -- to_torch (S13) --------------------------------------------------------------------------

def test_to_torch_copy_is_independent():
    t = tensor(np.arange(4, dtype=np.float32))
    c = t.to_torch(copy=True)
    c.zero_()
    np.testing.assert_array_equal(t.numpy(), np.arange(4))


def test_to_torch_hands_the_storage_over_and_from_torch_takes_it_back():
    t = tensor(np.arange(4, dtype=np.float32))
    shared, line = t.to_torch(), here()
    shared[0] = 42.0
    for use in (lambda: t.numpy(), lambda: t.shape, lambda: t[0], lambda: t.partition((4,)),
                lambda: t.to_torch(), lambda: str(t)):
        with pytest.raises(OwnershipError) as info:
            use()
        assert f"handed to torch at {__file__}:{line}" in info.value.message
        assert "ts.from_torch" in info.value.help
    back = from_torch(shared)
    assert back._state is t._state
    np.testing.assert_array_equal(back.numpy(), [42, 1, 2, 3])
    assert "handed to torch" in repr(t)                     # repr never raises


# -- S9: host accesses wait for pending device work -----------------------------------------

class FakeFuture:
    """Stands in for a launch's future: done once waited for."""
    def __init__(self):
        self.finished = False
        self.waits = 0

    def done(self):
        return self.finished

    def wait(self):
        self.waits += 1
        self.finished = True


def pending(t: Tensor, view: Tensor, is_write: bool) -> FakeFuture:
    fut = FakeFuture()
    t._state.record(view._byte_set(), is_write, fut)
    return fut


def test_host_read_waits_for_pending_writers_only():
    t = zeros(8)
    writer, reader = pending(t, t, True), pending(t, t, False)
    t.numpy()
    assert writer.waits == 1 and reader.waits == 0


def test_host_write_waits_for_pending_readers_and_writers():
    t = zeros(8)
    reader = pending(t, t[2:4], False)
    t[3] = 1.0
    assert reader.waits == 1


def test_host_access_to_disjoint_bytes_does_not_wait():
    t = zeros(8)
    writer = pending(t, t[:4], True)
    t[4:].numpy()
    t[4:] = 1.0
    assert writer.waits == 0
    assert t._state.pending_conflicts(t[:4]._byte_set(), write=False) == [writer]


def test_finished_accesses_are_pruned():
    t = zeros(8)
    writer = pending(t, t, True)
    writer.finished = True
    t.numpy()
    assert writer.waits == 0
    assert t._state.pending_conflicts(t._byte_set(), write=True) == []


def test_views_see_the_pending_work_of_other_views():
    t = zeros((4, 4))
    writer = pending(t, t[1], True)
    t.T[:, 1].numpy()                                       # column 1 crosses row 1
    assert writer.waits == 1


@pytest.mark.parametrize("access, what", [
    (lambda t: t.numpy(), "`numpy()`"),
    (lambda t: t.to_torch(copy=True), "`to_torch(copy=True)`"),
    (lambda t: t.to_torch(), "`to_torch()`"),
    (lambda t: str(t), "`numpy()`"),
    (lambda t: t.__setitem__(0, 1.0), "`x[...] = value`"),
    (lambda t: t.copy_(np.ones(8)), "`copy_()`"),
])
def test_strict_sync_turns_an_implicit_wait_into_an_error(access, what):
    t = zeros(8)
    writer = pending(t, t, True)
    with strict_sync():
        with pytest.raises(OwnershipError) as info:
            access(t)
    assert f"an implicit wait on pending device work was needed for {what}" in info.value.message
    assert "fut.sync()" in info.value.help
    assert writer.waits == 0
    writer.wait()
    with strict_sync():
        access(t)                                           # nothing pending: no error


def test_strict_sync_allows_reads_next_to_pending_reads():
    t = zeros(8)
    pending(t, t, False)
    with strict_sync():
        t.numpy()


def test_storage_state_is_shared_through_the_storage():
    t = zeros(8)
    assert StorageState.of(t._torch()[3:]) is t._state


# -- the same on a GPU (skipped without CUDA) ---------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_work_like_cpu_tensors():
    a = sample((8, 6)).astype(ml_dtypes.bfloat16)
    t = tensor(a, device="cuda")
    assert t.device.startswith("cuda") and t._state.init_mask is None
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(t.T[1:, ::2].numpy(), a.T[1:, ::2])
    e = empty((4, 4), dtypes.f32, device="cuda")
    e[:2] = 1.0
    with pytest.raises(OwnershipError, match="has not been written"):
        e.numpy()
    e._torch()[2:].fill_(2.0)
    e._state.mark_written(e._torch()[2:])                   # as a launch would
    np.testing.assert_array_equal(e.numpy(), np.r_[np.ones((2, 4)), np.full((2, 4), 2.0)])
    np.testing.assert_array_equal(rand(16, seed=5, device="cuda").numpy(), rand(16, seed=5, device="cuda").numpy())
    src = torch.arange(6.0, device="cuda")
    borrowed = from_torch(src)
    borrowed[0] = 9.0
    assert src[0].item() == 9.0
    assert tensor(borrowed).device == borrowed.device       # copies stay on the device
    p = borrowed.partition((4,))
    assert p.grid == (2,) and p.unpartition() is borrowed
