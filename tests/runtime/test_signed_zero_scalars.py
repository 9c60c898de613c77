"""-0.0 == 0.0 in Python, yet a kernel tells them apart (x * -0.0 is -0.0, x / -0.0 is -inf).
The launch fast paths that reuse a launch's verdicts by its values — the prepared path for
the same objects (launch_plan), the layout cache's keys for Const values (launch_cache) —
must not serve a launch with -0.0 from one made with 0.0. NumPy's signbit is the oracle."""
import numpy as np
import pytest

import tilesafe as ts


@ts.kernel
def times(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], s: float, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s)


@ts.kernel
def times_const(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], C: ts.Const[float], B: ts.Const[int],
                N: int):
    z.store(ts.load_tile_like(x, z) * C)


def _positive(n: int = 32) -> np.ndarray:
    return np.random.default_rng(3).uniform(0.5, 2.0, n).astype(np.float32)


def _signs(z: np.ndarray) -> np.ndarray:
    """Per element: True where it is a negative zero (the oracle of x * -0.0 for x > 0)."""
    return (z == 0) & np.signbit(z)


# Both backends: Triton 3.6 alone computes x * -0.0 as +0.0, whether -0.0 is an argument (its
# interpreter) or a literal of the generated source; the Triton backend keeps the sign
# (tests/lang/test_negative_zero.py).
@pytest.mark.parametrize("first, then", [(0.0, -0.0), (-0.0, 0.0)])
def test_the_same_objects_with_a_runtime_scalar_of_the_other_zero_compute_with_it(backend, first, then):
    times._layouts.forget()
    times._last_plan = None                                       # the first launch takes the full path
    x = ts.tensor(_positive())
    p = ts.full(32, np.nan).partition((16,))
    times(p, x, first).sync()
    times(p, x, then).sync()                                     # the same objects: the prepared path
    z = p.unpartition().numpy()
    np.testing.assert_array_equal(_signs(z), np.full(32, np.signbit(then)))


def test_new_objects_with_a_const_of_the_other_zero_compute_with_it(backend):
    for c in (0.0, 0.0, -0.0, -0.0, 0.0):                        # new objects: the layout cache
        p = ts.full(32, np.nan).partition((16,))
        times_const(p, ts.tensor(_positive()), c).sync()
        z = p.unpartition().numpy()
        np.testing.assert_array_equal(_signs(z), np.full(32, np.signbit(c)), err_msg=f"C = {c!r}")
