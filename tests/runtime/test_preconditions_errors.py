"""Preconditions and host constructors that cannot be evaluated are TileSafeErrors with help.

A precondition on an axis the tensor lacks, one that uses a tensor as a number, one that
divides by zero, and `ts.empty` of an impossible size used to let Python's or torch's own
exception through (IndexError, KeyError, ZeroDivisionError, RuntimeError).
"""
import sys

import numpy as np
import pytest

import tilesafe as ts


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def assert_launch_error(e, line: int, fragment: str, help_fragment: str) -> None:
    assert isinstance(e, ts.LaunchError), type(e)
    assert fragment in e.message, e.message
    assert e.help and help_fragment in e.help, e.help
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == line, str(e)
    text = str(e)
    assert text.startswith("error: ") and "Traceback" not in text and "tilesafe/" not in text, text


@ts.kernel(preconditions=["dim(x, 3) == 4"])
def missing_axis(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


@ts.kernel(preconditions=["x % 16 == 0"])
def tensor_as_number(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


@ts.kernel(preconditions=["dim(x, 0) % n == 0"])
def modulo_scalar(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], n: int, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


@ts.kernel(preconditions=["dim(n, 0) == 4"])
def dim_of_scalar(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], n: int, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


@ts.kernel(preconditions=["dim(x, 1 == 1) == 4"])
def bool_axis(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


def _args():
    x = ts.tensor(np.random.default_rng(7).standard_normal(32).astype(np.float32))
    return ts.empty(32).partition((16,)), x


def test_a_precondition_on_a_missing_axis_is_a_launch_error():
    z, x = _args()
    with pytest.raises(ts.TileSafeError) as info:
        missing_axis(z, x)
    assert_launch_error(info.value, here() - 1, "precondition `dim(x, 3) == 4` of `missing_axis` takes dim(x, 3), "
                        "but `x` has rank 1 (axes 0 to 0)", "name an axis below 1")
    with pytest.raises(ts.LaunchError, match="takes dim"):
        missing_axis.ir(ts.spec((32,), ts.f32, tile=(16,)), ts.spec((32,), ts.f32))   # inspection too


def test_a_precondition_that_uses_a_tensor_as_a_number_is_a_launch_error():
    z, x = _args()
    with pytest.raises(ts.TileSafeError) as info:
        tensor_as_number(z, x)
    assert_launch_error(info.value, here() - 1, "precondition `x % 16 == 0` of `tensor_as_number` uses the tensor "
                        "`x` as a number", "dim(x, 0)")


def test_a_precondition_that_divides_by_zero_is_a_launch_error():
    z, x = _args()
    with pytest.raises(ts.TileSafeError) as info:
        modulo_scalar(z, x, 0)
    assert_launch_error(info.value, here() - 1, "precondition `dim(x, 0) % n == 0` of `modulo_scalar` cannot be "
                        "evaluated", "integers")
    z, x = _args()
    modulo_scalar(z, x, 8).sync()                                   # the same kernel, a valid divisor
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy())


def test_dim_of_a_scalar_and_a_non_integer_axis_are_launch_errors():
    z, x = _args()
    with pytest.raises(ts.TileSafeError) as info:
        dim_of_scalar(z, x, 3)
    assert_launch_error(info.value, here() - 1, "takes dim() of `n`, which is not a tensor", "dim(x, axis)")
    with pytest.raises(ts.TileSafeError) as info:
        bool_axis(z, x)
    assert_launch_error(info.value, here() - 1, "takes dim() of `x` along True; an axis is an integer",
                        "dim(x, 0)")


def test_a_call_other_than_dim_is_refused_at_definition():
    with pytest.raises(ts.KernelError) as info:
        @ts.kernel(preconditions=["n(3) > 0"])
        def calls_a_scalar(z: ts.Mut[ts.f32, (16,)], n: int):
            z.store(ts.zeros((16,), ts.f32))
    assert "precondition 'n(3) > 0': only dim(tensor, axis) can be called" in info.value.message
    assert "dim(x, 0)" in info.value.help


def test_a_precondition_that_holds_still_launches():
    @ts.kernel(preconditions=["dim(x, 0) % 16 == 0", "dim(x, -1) == N"])
    def copy(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
        z.store(ts.load_tile_like(x, z))
    z, x = _args()
    copy(z, x).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy())


# -- ts.empty of an impossible size --------------------------------------------------------------
@pytest.mark.parametrize("make", [ts.empty, ts.zeros], ids=["empty", "zeros"])
def test_an_impossible_size_is_a_launch_error(make):
    with pytest.raises(ts.TileSafeError) as info:
        make((2 ** 62,))
    e = info.value
    assert isinstance(e, ts.LaunchError) and e.help
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == here() - 3
    assert "overflow" in e.message


@pytest.mark.parametrize("make, args", [(ts.zeros, ()), (ts.ones, (ts.i8,)), (ts.full, (2.5, ts.bf16))],
                         ids=["zeros", "ones", "full"])
def test_a_filled_constructor_of_an_impossible_size_says_it_cannot_allocate(make, args):
    with pytest.raises(ts.LaunchError) as info:
        make((2 ** 62,), *args)
    e = info.value
    assert e.message.startswith("cannot allocate a ts.") and "tensor of shape (4611686018427387904,)" in e.message
    assert "cannot fill" not in e.message and e.help == "pick a shape whose bytes fit in the device's memory"
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == here() - 4


def test_a_value_that_does_not_fit_is_still_a_fill_error():
    with pytest.raises(ts.LaunchError) as info:
        ts.full((4,), 300, ts.u8)
    assert info.value.message.startswith("cannot fill a ts.u8 tensor with 300")
    assert info.value.help == "pass a number that fits ts.u8"


def test_empty_names_the_shape_and_dtype_it_cannot_allocate():
    with pytest.raises(ts.LaunchError) as info:
        ts.empty((2 ** 31, 2 ** 31), ts.bf16)
    assert "cannot allocate a ts.bf16 tensor of shape (2147483648, 2147483648)" in info.value.message
    assert "fit" in info.value.help
