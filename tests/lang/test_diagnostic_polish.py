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
