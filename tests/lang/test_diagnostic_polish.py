"""Diagnostics that must point at the user's line and say how to fix it: a host call of a
device op, a failed static_assert, a carried variable whose type the loop changes, and a bad
precondition string. Each asserts the class, the message, the help and the reported line
(the line marked `# E:<name>`)."""
import pytest
from lang_helpers import assert_diagnostic

import tilesafe as ts

HERE = __file__


def test_host_call_of_a_device_op_points_at_the_call():
    with pytest.raises(ts.KernelError) as ei:
        ts.exp(1.0)  # E:host-exp
    assert_diagnostic(ei.value, HERE, "E:host-exp", "`ts.exp` is a device-side operation")
    assert ei.value.help == "call it from a function decorated with @ts.kernel (or @ts.function)"
    assert ei.value.loc.col == 9 and ei.value.loc.width == len("ts.exp(1.0)")


def test_failed_static_assert_says_when_it_is_checked_and_what_to_change():
    @ts.kernel
    def needs_16(z: ts.Mut[ts.f32, ("B",)], B: ts.Const[int]):
        ts.static_assert(B % 16 == 0, "B must be a multiple of 16")  # E:static-assert
        z.store(ts.zeros((B,)))

    with pytest.raises(ts.KernelError) as ei:
        needs_16(ts.empty(8).partition((8,)))
    assert_diagnostic(ei.value, HERE, "E:static-assert", "static assertion failed: B must be a multiple of 16")
    assert "specialized" in ei.value.help and "pass arguments that satisfy it" in ei.value.help


def test_carried_type_change_suggests_the_type_the_loop_gives_and_marks_the_header():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def grows(z: ts.Mut[ts.f32, (8,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            acc = 0
            for k in range(4):  # E:carried-for
                acc = acc + ts.load(x, (k,), shape=(8,))
            z.store(acc)
    assert_diagnostic(ei.value, HERE, "E:carried-for", "`acc` changes type inside the loop or branch: i32 before, f32[8] after")
    assert "ts.zeros((8,), ts.f32)" in ei.value.help and "ts.i32" not in ei.value.help
    assert ei.value.loc.width == len("for k in range(4)")


def test_carried_type_change_in_a_branch_marks_the_if_header():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def widens(z: ts.Mut[ts.f32, (8,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            acc = ts.zeros((8,), ts.f16)
            if N > 4:  # E:carried-if
                acc = ts.load(x, (0,), shape=(8,))
            z.store(ts.astype(acc, ts.f32))
    assert_diagnostic(ei.value, HERE, "E:carried-if", "`acc` changes type inside the loop or branch: f32[8] before, f16[8] after")
    assert "ts.zeros((8,), ts.f32)" in ei.value.help and "ts.f16" not in ei.value.help
    assert ei.value.loc.width == len("if N > 4")


def test_a_precondition_with_bad_syntax_points_at_its_string_in_the_decorator():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel(preconditions=["N > 0", "N %% 2 == 0"])  # E:pre-syntax
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            z.store(ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:pre-syntax", "precondition 'N %% 2 == 0' is not a valid expression")
    assert ei.value.help == "preconditions use parameters, numbers and dim(tensor, axis)"
    line = open(HERE).read().splitlines()[ei.value.loc.line - 1]
    assert line[ei.value.loc.col - 1:][:ei.value.loc.width] == '"N %% 2 == 0"'


def test_a_precondition_naming_no_parameter_points_at_the_decorator():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel(
            preconditions=["M % 2 == 0"],  # E:pre-unknown
        )
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            z.store(ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:pre-unknown", "precondition 'M % 2 == 0' names `M`, which is not a parameter")
    line = open(HERE).read().splitlines()[ei.value.loc.line - 1]
    assert line[ei.value.loc.col - 1:][:ei.value.loc.width] == '"M % 2 == 0"'


PRECONDITIONS = ["dim(y, 0) > 0"]   # not a literal in the decorator: the error marks the argument


def test_a_precondition_from_a_variable_points_at_the_preconditions_argument():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel(preconditions=PRECONDITIONS)  # E:pre-variable
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            z.store(ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:pre-variable", "names `y`, which is not a parameter")
