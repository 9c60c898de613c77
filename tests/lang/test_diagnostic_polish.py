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
