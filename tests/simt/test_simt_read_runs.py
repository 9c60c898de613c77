"""`a, b, c, d = x.run(i, 4)`: k consecutive elements of a rank-1 input, each read checked; on the GPU
one 128-bit load when the run is 16 bytes of an aligned, unit-stride input (sum_all reads this way)."""
import numpy as np
import pytest
import torch
from simt_helpers import assert_diagnostic, marker_line

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples import block_sum

HERE = __file__
B32 = simt.Contract(block=(32,))


@simt.kernel(contract=B32)
def pair_sums(out: simt.Disjoint[ts.f32, ("M",)], x: simt.Ref[ts.f32, ("N",)], M: int, N: int):
    for p in out.permits(simt.per_thread()):
        a, b, c, d = x.run(p[0] * 2, 4)  # E:run
        out[p] = a + 10.0 * b + 100.0 * c + 1000.0 * d


def test_a_run_reads_consecutive_elements():
    x = torch.arange(12, dtype=torch.float32)
    out = torch.full((5,), float("nan"))
    pair_sums(out, x).sync()                           # out[m] from x[2m .. 2m+3]
    m = np.arange(5)
    want = 2 * m + 10 * (2 * m + 1) + 100 * (2 * m + 2) + 1000 * (2 * m + 3)
    np.testing.assert_array_equal(out.numpy(), want.astype(np.float32))
    assert pair_sums.checks()["checked_reads"] == [("x", marker_line(HERE, "E:run"))]


def test_a_run_past_the_end_is_a_failed_check_at_its_line():
    with pytest.raises(ts.SanitizerError, match=r"out-of-bounds read of `x` at \(12,\)") as e:
        pair_sums(torch.empty(6), torch.arange(12, dtype=torch.float32)).sync()     # m = 5 reads x[10 .. 13]
    assert e.value.loc.line == marker_line(HERE, "E:run")


@pytest.mark.parametrize("n, blocks", [(1, 1), (7, 2), (1000, 2), (5003, 3)])
def test_sum_all_reads_runs_and_the_ragged_end(n, blocks):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    total = torch.full((1,), 1.0)
    block_sum.launch_sum(total, x, blocks=blocks).sync()
    torch.testing.assert_close(total, (x.double().sum() + 1.0).float().reshape(1), rtol=1e-5, atol=1e-4)


def refused(src_marker, fragment, make):
    with pytest.raises(ts.KernelError) as e:
        make()
    assert_diagnostic(e.value, HERE, src_marker, fragment)


def test_a_run_must_be_unpacked():
    def make():
        @simt.kernel(contract=B32)
        def whole(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = x.run(p[0], 2)  # E:whole
    refused("E:whole", "unpack", make)


def test_a_run_unpacked_into_the_wrong_count_is_refused():
    def make():
        @simt.kernel(contract=B32)
        def three(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                a, b, c = x.run(p[0], 4)  # E:count
                out[p] = a + b + c
    refused("E:count", "gives 4 values, unpacked into 3", make)


def test_a_run_of_an_output_or_a_rank2_input_is_refused():
    def of_output():
        @simt.kernel(contract=B32)
        def from_out(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                a, b = out.run(p[0], 2)  # E:output
                out[p] = a + b
    refused("E:output", "reads a rank-1 simt.Ref", of_output)

    def of_matrix():
        @simt.kernel(contract=B32)
        def from_matrix(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N", "N")], N: int):
            for p in out.permits(simt.per_thread()):
                a, b = x.run(p[0], 2)  # E:matrix
                out[p] = a + b
    refused("E:matrix", "reads a rank-1 simt.Ref", of_matrix)


def test_a_run_longer_than_16_is_refused():
    def make():
        @simt.kernel(contract=B32)
        def long_run(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                a, = x.run(p[0], 17)  # E:long
                out[p] = a
    refused("E:long", "must be 1 to 16", make)


def test_a_runs_length_from_a_const_is_refused():
    # The unpacking fixes k; a Const length would go unchecked until a launch (K=20: no 20-wide load
    # on the GPU; K=3 unpacked into 2: numba's error, where the CPU executor raised Python's).
    def make():
        @simt.kernel(contract=B32)
        def const_run(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int,
                      K: simt.Const[int]):
            for p in out.permits(simt.per_thread()):
                a, b = x.run(p[0], K)  # E:const
                out[p] = a + b
    refused("E:const", "x.run's length must be a literal or a module-level int", make)


@simt.kernel(contract=B32)
def float_run(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        a, b = x.run(p[0] / 2, 2)  # E:float-run
        out[p] = a + b


def test_a_run_at_a_float_index_is_refused_on_the_cpu_as_on_the_gpu():
    with pytest.raises(ts.KernelError) as e:
        float_run(torch.zeros(4), torch.ones(4)).sync()
    assert_diagnostic(e.value, HERE, "E:float-run", "index 0.0 of `x` is a float")
