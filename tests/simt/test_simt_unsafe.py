"""Unsafe SIMT kernels: outputs written at computed indices and raw atomics, launched only by
`unsafe_launch`; the CPU executor checks bounds and races (as the reference sanitizer does for
unsafe tile kernels)."""
import numpy as np
import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt

HERE = __file__
C64 = simt.Contract(block=(64,))


@simt.kernel(contract=C64, unsafe=True)
def scatter(out: simt.Disjoint[ts.f32, ("N",)], idx: simt.Ref[ts.i32, ("M",)], M: int, N: int):
    i = simt.global_id()
    if i < M:
        out[idx[i]] = i * 1.0  # E:raw-write


@simt.kernel(contract=C64, unsafe=True)
def count_into(out: simt.Disjoint[ts.i32, ("N",)], idx: simt.Ref[ts.i32, ("M",)], M: int, N: int):
    i = simt.global_id()
    if i < M:
        out.add(idx[i], 1)


def test_a_permutation_scatter_runs_and_marks_what_it_wrote():
    out = ts.empty(5)
    scatter.unsafe_launch(out, torch.tensor([4, 0, 3, 1, 2], dtype=torch.int32), grid=(1,)).sync()
    np.testing.assert_array_equal(out.numpy(), [1, 3, 4, 2, 0])


def test_two_threads_writing_one_element_is_a_race():
    with pytest.raises(ts.SanitizerError) as ei:
        scatter.unsafe_launch(torch.zeros(4), torch.tensor([1, 1], dtype=torch.int32), grid=(1,)).sync()
    assert_diagnostic(ei.value, HERE, "E:raw-write", "race: element (1,) of `out` is written by threads 0 and 1")


def test_an_out_of_bounds_write_is_reported():
    with pytest.raises(ts.SanitizerError) as ei:
        scatter.unsafe_launch(torch.zeros(4), torch.tensor([7], dtype=torch.int32), grid=(1,)).sync()
    assert_diagnostic(ei.value, HERE, "E:raw-write", "out-of-bounds write to `out` at (7,)")


def test_raw_atomics_on_an_output_need_it_initialised():
    idx = torch.tensor([0, 2, 2, 2], dtype=torch.int32)
    out = torch.zeros(3, dtype=torch.int32)
    count_into.unsafe_launch(out, idx, grid=(1,)).sync()
    assert out.tolist() == [1, 0, 3]
    with pytest.raises(ts.OwnershipError, match="argument `out` of `count_into` is read"):
        count_into.unsafe_launch(ts.empty(3, dtype=ts.i32), idx, grid=(1,))


def test_unsafe_kernels_are_launched_only_by_unsafe_launch():
    with pytest.raises(ts.LaunchError, match="is an unsafe SIMT kernel and cannot be launched by a plain call"):
        scatter(torch.zeros(4), torch.zeros(1, dtype=torch.int32))
    from tilesafe.simt.examples.vector_add import vector_add
    with pytest.raises(ts.LaunchError, match="is a safe SIMT kernel; call it directly"):
        vector_add.unsafe_launch(torch.zeros(4), torch.zeros(4), torch.zeros(4))


def test_the_lowering_checks_unsafe_writes():
    source = scatter.numba_source(torch.zeros(4), torch.zeros(2, dtype=torch.int32), grid=(1,))
    line = scatter.src.loc(next(iter([n for n in __import__("ast").walk(scatter.src.tree)
                                      if isinstance(n, __import__("ast").Subscript)
                                      and getattr(n.value, "id", "") == "out"]))).line
    assert f"__f32(i * __f32(1.0))" not in source
    assert f"__stw1(out, out__wrote, __ld1(idx, i, __bad, {line}), i * __f32(1.0), __err, {line})" in source
    assert "def simt_scatter(out, idx, M, N, __err, out__wrote):" in source    # the write mask follows the flag
