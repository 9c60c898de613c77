"""Constant tables: a third address space, read-only, its own type (issue 18's typed address spaces)."""
import numpy as np
import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt

HERE = __file__
C64 = simt.Contract(block=(64,))
SQUARES = simt.table(np.arange(16, dtype=np.float32) ** 2)


@simt.kernel(contract=C64)
def lookup(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.i32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = SQUARES[x[p]] + SQUARES[simt.lane() % 16] * 0.0   # a checked read, then a proven one


def test_a_table_is_read_like_a_tensor_and_checked():
    x = torch.tensor([3, 0, 15, 7], dtype=torch.int32)
    out = torch.full((4,), float("nan"))
    lookup(out, x).sync()
    assert out.tolist() == [9.0, 0.0, 225.0, 49.0]
    with pytest.raises(ts.SanitizerError, match="out-of-bounds read of `constant table` at \\(16,\\)"):
        lookup(out[:1], torch.tensor([16], dtype=torch.int32)).sync()


def test_the_lowering_puts_the_table_in_constant_memory():
    source = lookup.numba_source(torch.empty(4), torch.zeros(4, dtype=torch.int32))
    assert "SQUARES = cuda.const.array_like(__table_SQUARES)" in source
    assert "__at1(SQUARES, cuda.threadIdx.x & 31 & 15)" in source     # proven: no check (% 32 % 16 as masks)
    assert "__ld1(SQUARES, __ld1(x, p__0" not in source and "__ld1(SQUARES, __at1(x, p__0)" in source
    assert set(lookup.table_globals()) == {"__table_SQUARES"}


def test_a_table_is_a_private_read_only_copy():
    values = np.ones(4, dtype=np.float32)
    t = simt.table(values)
    values[0] = 5
    assert t.array[0] == 1 and not t.array.flags.writeable


def test_writing_a_table_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=C64)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                SQUARES[p] = 1.0  # E:write-table
    assert_diagnostic(ei.value, HERE, "E:write-table", "cannot write `SQUARES`: it is a constant table")


def test_a_table_is_not_a_global_tensor_or_a_value():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=C64)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            t = SQUARES  # E:table-value
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:table-value", "constant table `SQUARES` cannot be used as a value")
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=C64)
        def k2(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            SQUARES.add(0, 1.0)  # E:table-atomic
    assert_diagnostic(ei.value, HERE, "E:table-atomic", "constant table `SQUARES` is read-only")


def test_a_table_larger_than_constant_memory_is_refused():
    with pytest.raises(ts.KernelError, match="larger than constant memory"):
        simt.table(np.zeros(20000, dtype=np.float32))
