"""SIMT launches obey the runtime's host rules (S7, S8, S13, S14) and the CPU sanitizer reports
run-time failures at the kernel's line."""
import math

import numpy as np
import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples.histogram import histogram
from tilesafe.simt.examples.vector_add import vector_add

HERE = __file__
C64 = simt.Contract(block=(64,))


@simt.kernel(contract=C64)
def shifted(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = x[p[0] + 1]  # E:oob


@simt.kernel(contract=C64)
def shifted_get(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = x.get(p[0] + 1, -1.0)


@simt.kernel(contract=C64)
def saxpy(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], alpha: float, N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = alpha * x[p] + 1.0


@simt.kernel(contract=C64)
def evens(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.at(simt.global_id() * 2)):
        out[p] = 1.0


def test_an_out_of_bounds_read_stops_the_kernel_at_its_line():
    x, out = torch.arange(10, dtype=torch.float32), torch.empty(10)
    with pytest.raises(ts.SanitizerError) as ei:
        shifted(out, x).sync()
    assert_diagnostic(ei.value, HERE, "E:oob", "out-of-bounds read of `x` at (10,)")


def test_get_reads_a_default_outside():
    x, out = torch.arange(10, dtype=torch.float32), torch.full((10,), float("nan"))
    shifted_get(out, x).sync()
    np.testing.assert_array_equal(out.numpy(), np.r_[np.arange(1, 10), -1].astype(np.float32))


def test_uniform_float_scalars():
    x, out = torch.arange(70, dtype=torch.float32), torch.empty(70)
    saxpy(out, x, 0.5).sync()
    torch.testing.assert_close(out, 0.5 * x + 1)
    with pytest.raises(ts.LaunchError, match="argument `alpha` of `saxpy` must be float"):
        saxpy(out, x, "half")


def test_partial_coverage_leaves_the_rest_unwritten():
    out = ts.empty(9)
    evens(out).sync()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        out.numpy()                                   # odd elements were never written (S14)
    assert out[0:9:2].numpy().tolist() == [1.0] * 5


def test_reading_an_unwritten_input_is_refused():
    out, x = torch.empty(8), ts.empty(8)
    with pytest.raises(ts.OwnershipError, match="argument `x` of `vector_add` is read, but it came from ts.empty"):
        vector_add(out, x, x)


def test_an_atomic_target_must_be_initialised():
    with pytest.raises(ts.OwnershipError, match="argument `hist` of `histogram` is read"):
        histogram.launch(ts.empty(4, dtype=ts.i32), torch.zeros(8, dtype=torch.int32), grid=(1,))


def test_a_lent_tensor_is_refused():
    x = ts.ones(64)
    p = x.partition((16,))
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        vector_add(torch.empty(64), x, torch.ones(64))
    assert p.unpartition() is x


def test_an_output_overlapping_itself_is_refused():
    x = torch.ones(1).expand(64)                      # stride 0: every element is one float
    with pytest.raises(ts.AliasError, match="overlaps itself"):
        vector_add(x, torch.ones(64), torch.ones(64))


def test_dtype_rank_and_named_extents_are_checked():
    with pytest.raises(ts.LaunchError, match="has dtype f64, but the kernel declares f32"):
        vector_add(torch.empty(8), torch.ones(8, dtype=torch.float64), torch.ones(8))
    with pytest.raises(ts.LaunchError, match="tensors whose shapes share the name `N` must agree"):
        vector_add(torch.empty(8), torch.ones(9), torch.ones(8))


def test_an_atomic_index_outside_the_target_is_reported():
    hist = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ts.SanitizerError, match="out-of-bounds atomic add on `hist` at \\(5,\\)"):
        histogram.launch(hist, torch.tensor([0, 5], dtype=torch.int32), grid=(1,)).sync()


def test_a_kernel_without_output_permits_needs_a_grid():
    with pytest.raises(ts.LaunchError, match="has no output permits to derive its grid from"):
        histogram(torch.zeros(3, dtype=torch.int32), torch.zeros(4, dtype=torch.int32))


def test_device_operations_outside_a_kernel_say_how_to_use_them():
    with pytest.raises(ts.KernelError, match="simt.barrier\\(\\) is a device-side operation"):
        simt.barrier()


def test_unsupported_dtypes_are_refused_at_definition():
    with pytest.raises(ts.KernelError, match="has dtype bf16, which SIMT kernels do not take"):
        @simt.kernel(contract=C64)
        def k(out: simt.Disjoint[ts.bf16, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0


def test_a_repeated_launch_takes_its_plan_and_still_checks_lending():
    x, y = ts.ones(64), torch.ones(64)
    out = torch.empty(64)
    vector_add(out, x, y).sync()
    vector_add(out, x, y).sync()
    assert len(vector_add.plans) >= 1
    p = x.partition((16,))                           # same layout, but x is lent now (S8)
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        vector_add(out, x, y)
    p.unpartition()
    vector_add(out, x, y).sync()
    assert torch.all(out == 2)


@simt.kernel(contract=C64)
def first_half(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        if p[0] >= N // 2:
            break
        out[p] = 1.0


def test_a_walk_that_may_stop_early_marks_only_what_it_wrote():
    out = ts.empty(10)
    first_half(out).sync()
    assert out[:5].numpy().tolist() == [1.0] * 5
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        out.numpy()


@simt.kernel(contract=C64)
def fill(out: simt.Disjoint[ts.f32, ("N",)], N: int, value: float = 2.5, K: simt.Const[int] = 1):
    for p in out.permits(simt.chunk(K)):
        out[p] = value


def test_parameters_take_their_defaults():
    out = torch.empty(100)
    fill(out).sync()
    assert torch.all(out == 2.5)
    fill(out, value=1.0, K=3).sync()
    assert torch.all(out == 1.0)
    with pytest.raises(ts.LaunchError, match="is missing the argument `alpha`"):
        saxpy(out, torch.ones(100))                  # no default, no extent: it must be passed


def test_a_grid_given_as_a_list_launches_and_takes_its_plan():
    # the layout key held the list itself: hashing it raised a TypeError from tilesafe's internals
    x, y = torch.ones(100), torch.ones(100)
    for _ in range(2):
        out = torch.full((100,), float("nan"))
        vector_add.launch(out, x, y, grid=[1]).sync()
        assert torch.equal(out, x + y)
    with pytest.raises(ts.LaunchError, match=r"grid \(2, 1, 1\) does not cover the outputs of `vector_add` exactly"):
        vector_add.launch(out, x, y, grid=[2])


def test_a_float_scalar_of_either_sign_of_zero_reaches_the_kernel():
    # 0.0 == -0.0 (and their hashes agree), so a plan keyed by the scalar's value alone ran -0.0
    # with the 0.0 its first launch had bound (1 / value is -inf against inf)
    for value in (0.0, -0.0, 0.0):
        out = torch.full((8,), float("nan"))
        fill(out, value=value).sync()
        assert torch.signbit(out).tolist() == [math.copysign(1.0, value) < 0] * 8, value


def test_a_sparse_or_meta_torch_tensor_is_refused_as_a_launch_error():
    # the layout key asked a sparse tensor for its data pointer: torch's RuntimeError escaped
    for bad in (torch.ones(8).to_sparse(), torch.ones(8, device="meta")):
        with pytest.raises(ts.LaunchError, match="ts.from_torch takes a dense CPU or CUDA tensor"):
            vector_add(bad, torch.ones(8), torch.ones(8))
