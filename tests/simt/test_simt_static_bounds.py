"""Static ranges prove shared reads in bounds only from what the GPU computes: a module-level int
counts only where the kernel's own name does not hide it (a parameter, `Const` or not, or a name
the kernel assigns), as the lowering turns only unhidden names into literals. A read the
analysis took for proven runs on the GPU without any check (`__at`). Axes and permit
coordinates named by module-level ints mean the same axis on the CPU and in the GPU lowering."""
import pytest
import torch
from simt_helpers import assert_diagnostic, marker_line

import tilesafe as ts
from tilesafe import simt

HERE = __file__
B8 = simt.Contract(block=(8,))
T = 4            # module-level ints the kernels below hide with their own names
J = 2
K = 3


@simt.kernel(contract=B8)
def by_parameter(out: simt.Disjoint[ts.f32, ("N",)], T: int, N: int):
    s = simt.shared((8,), ts.f32)
    for p in s.permits(simt.per_thread()):
        s[p] = p[0] * 1.0
    simt.barrier()
    v = s[T]  # E:parameter
    for p in out.permits(simt.per_thread()):
        out[p] = v


@simt.kernel(contract=B8)
def by_const(out: simt.Disjoint[ts.f32, ("N",)], N: int, T: simt.Const[int] = 6):
    s = simt.shared((8,), ts.f32)
    for p in s.permits(simt.per_thread()):
        s[p] = p[0] * 1.0
    simt.barrier()
    v = s[T]  # E:const
    for p in out.permits(simt.per_thread()):
        out[p] = v


@simt.kernel(contract=B8)
def by_local(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    s = simt.shared((8,), ts.f32)
    for p in s.permits(simt.per_thread()):
        s[p] = p[0] * 1.0
    simt.barrier()
    J = 1
    J = J + 5
    v = s[J] + s[K]  # s[K] reads the module's K, proven  # E:local
    for p in out.permits(simt.per_thread()):
        out[p] = v


@pytest.mark.parametrize("kernel, marker", [(by_parameter, "E:parameter"), (by_const, "E:const"),
                                            (by_local, "E:local")])
def test_a_name_the_kernel_owns_is_not_the_module_int_it_hides(kernel, marker):
    assert kernel.checks()["checked_reads"] == [("s", marker_line(HERE, marker))]


def test_the_hidden_names_take_their_own_values():
    out = torch.full((8,), float("nan"))
    by_parameter(out, 5).sync()
    assert out.tolist() == [5.0] * 8
    by_const(out, T=7).sync()
    assert out.tolist() == [7.0] * 8
    by_local(out).sync()
    assert out.tolist() == [6.0 + 3.0] * 8
    assert by_local.checks()["proven_reads"] == 1       # s[K]: the module's K
    with pytest.raises(ts.SanitizerError, match=r"out-of-bounds read of `s` at \(100,\)"):
        by_parameter(out, 100).sync()


@pytest.mark.gpu
def test_gpu_a_hidden_name_out_of_range_is_caught_by_the_check():
    out = torch.full((8,), float("nan"), device="cuda")
    by_parameter(out, 5).sync()
    assert out.tolist() == [5.0] * 8
    with pytest.raises(ts.SanitizerError) as ei:
        by_parameter(out, 100).sync()              # past the shared array: the checked read reports it
    assert ei.value.loc.line == marker_line(HERE, "E:parameter")
    by_const(out, T=7).sync()
    assert out.tolist() == [7.0] * 8


# -- axes named by module-level ints ----------------------------------------------------------------
A = 1


@simt.kernel(contract=simt.Contract(block=(2, 4)))
def by_named_axis(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
    for p in out.permits(simt.per_thread()):
        out[p] = simt.thread_id(A) * 10.0 + p[A] + simt.block_dim(A) * 100.0


def test_an_axis_named_by_a_module_int_is_that_axis_on_both_paths():
    # the GPU lowering read only literal axes: thread_id(A) became threadIdx.x and p[A] failed with
    # an AttributeError from tilesafe's internals
    out = torch.full((8, 4), float("nan"))
    by_named_axis(out).sync()
    rows, cols = torch.meshgrid(torch.arange(8.0), torch.arange(4.0), indexing="ij")
    assert torch.equal(out, (rows % 4) * 10 + cols + 400)
    body = by_named_axis.numba_source(torch.empty(8, 4))
    body = body[body.index("def simt_by_named_axis"):]
    assert "cuda.threadIdx.y * __f32(10.0) + p__1 + 4 * __f32(100.0)" in body


def test_an_axis_a_parameter_hides_is_not_a_compile_time_int():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=simt.Contract(block=(2, 4)))
        def k(out: simt.Disjoint[ts.f32, ("R", "C")], A: int, R: int, C: int):
            for p in out.permits(simt.per_thread()):
                out[p] = simt.thread_id(A) * 1.0  # E:hidden-axis
    assert_diagnostic(ei.value, HERE, "E:hidden-axis", "an axis must be a compile-time int")



B32 = simt.Contract(block=(32, 1))


@simt.kernel(contract=B32)
def rows_of_const(out: simt.Disjoint[ts.f32, ("N",)], N: int, F: int, R: simt.Const[int], S: simt.Const[int]):
    s = simt.shared((R, 32), ts.f32)
    for p in s.permits(simt.chunk(R)):       # column tx, rows 0..R-1: every element
        s[p] = p[0] * 32.0 + p[1]
    simt.barrier()
    t = simt.thread_id()
    acc = 0.0
    for j in range(R):                        # the axis's own Const: proven
        acc += s[j, t]
    for j in range(R):                        # the same loop again (two bindings of j, one range): proven
        acc += s[j, t] * 2.0
    for i in range(1, R):                     # a start >= 0: proven
        acc += s[i, t]
    for k in range(R + F):
        acc += s[k, t]  # E:past-the-end
    for m in range(S):
        acc += s[m, t]  # E:other-const
    for p in out.permits(simt.per_block(1)):
        out[p] = acc


def test_a_range_over_the_const_an_axis_is_sized_by_proves_the_reads():
    assert rows_of_const.checks()["checked_reads"] == [("s", marker_line(HERE, "E:past-the-end")),
                                                       ("s", marker_line(HERE, "E:other-const"))]
    out = torch.full((1,), float("nan"))
    rows_of_const(out, F=0, R=3, S=2).sync()             # thread 0 holds out[0]: column 0, rows 0..2
    assert out.item() == 96 + 2 * 96 + 96 + 96 + 32
    with pytest.raises(ts.SanitizerError, match="out-of-bounds read of `s`"):
        rows_of_const(out, F=1, R=3, S=2).sync()         # k = R: the checked read fails


@simt.kernel(contract=B32)
def after_the_loop(out: simt.Disjoint[ts.f32, ("N",)], N: int, R: simt.Const[int]):
    s = simt.shared((R, 32), ts.f32)
    for p in s.permits(simt.chunk(R)):
        s[p] = 1.0
    simt.barrier()
    t = simt.thread_id()
    acc = 0.0
    for j in range(R):
        acc += s[j, t]                        # inside the loop: j < R, and R >= 1 since the loop runs
    acc += s[j, t]  # E:after-loop
    for p in out.permits(simt.per_block(1)):
        out[p] = acc


def test_a_loop_variable_read_after_its_loop_is_checked():
    # After `for j in range(R)`, j is unbound when R == 0 (numba then reads s[0] of a 0-element array):
    # only reads inside a loop that binds j are proven by its range.
    assert after_the_loop.checks()["checked_reads"] == [("s", marker_line(HERE, "E:after-loop"))]
    out = torch.full((1,), float("nan"))
    after_the_loop(out, R=2).sync()
    assert out.item() == 3.0


@simt.kernel(contract=simt.Contract(block=(32,)))
def empty_range(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    s = simt.shared((0,), ts.f32)
    acc = 0.0
    for j in range(0):
        acc += 1.0
    acc += s[j]  # E:empty
    for p in out.permits(simt.per_thread()):
        out[p] = acc


def test_an_empty_range_proves_no_read():
    # range(0) is the span (0, -1), "inside" a 0-element axis; j is unbound after it (numba: 0)
    assert empty_range.checks()["checked_reads"] == [("s", marker_line(HERE, "E:empty"))]
