"""When two argument values are the same to a kernel: equal, and zeros of one sign.

Python has -0.0 == 0.0 (and both hash alike), yet a kernel tells them apart: x * -0.0 is
-0.0 and x / -0.0 is -inf. The fast paths that reuse what a launch decided for a value (the
prepared path's same arguments, the launch cache's Const keys and its launchers per set of
runtime scalars, a library call plan's key) compare values by `value_key`, so a launch with
-0.0 never runs code or arguments made for 0.0.
"""
from __future__ import annotations

import math


def value_key(v) -> tuple:
    """`(type, value)`, and a zero's sign where it has one. Two keys are equal only when a
    kernel cannot tell the values apart (a NaN equals no other object: never reused)."""
    t = type(v)
    if t is int or t is bool or t is str:
        return (t, v)
    try:
        if not v:
            return (t, v, math.copysign(1.0, v))     # 0.0 and -0.0 (numpy's floats too)
    except (TypeError, ValueError):                   # no sign, or no truth value: `==` decides
        pass
    return (t, v)
