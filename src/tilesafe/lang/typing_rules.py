"""Dtype promotion and shape broadcasting: the static typing rules of S3.

Python scalars are *weak*: they take a tile's dtype (an int tile times a Python float is
f32). Two different float dtypes never mix implicitly; the user writes `astype`.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..dtypes import DType


class TypingError(Exception):
    """Raised by the rules; the frontend turns it into a located KernelError."""

    def __init__(self, message: str, help: str | None = None):
        super().__init__(message)
        self.help = help


def python_scalar_dtype(value) -> DType:
    if isinstance(value, bool):
        return dt.bool_
    if isinstance(value, int):
        return dt.i32 if -2**31 <= value < 2**31 else dt.i64
    if isinstance(value, float):
        return dt.f32
    raise TypingError(f"{type(value).__name__} value {value!r} cannot be used as a number in a kernel")


def promote(a: DType, b: DType) -> DType:
    """The common dtype of two tile/scalar operands (both strongly typed)."""
    if a == b:
        return a
    if a.is_float and b.is_float:
        raise TypingError(f"cannot mix {a.name} and {b.name} implicitly",
                          help=f"convert one side with ts.astype(x, ts.{a.name}) or ts.astype(x, ts.{b.name})")
    if a.is_float:
        return a
    if b.is_float:
        return b
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "uint" else b   # same width, mixed signedness: unsigned, as in C


def promote_weak(strong: DType, weak_value) -> DType:
    """A tile/scalar of dtype `strong` combined with a Python scalar."""
    if isinstance(weak_value, bool):
        return strong
    if isinstance(weak_value, float):
        return strong if strong.is_float else dt.f32
    if isinstance(weak_value, int):
        if strong.is_bool:
            return dt.i32
        return strong
    raise TypingError(f"cannot combine {type(weak_value).__name__} with a tile")


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of two static shapes."""
    out = []
    for x, y in zip(((1,) * (len(b) - len(a))) + a, ((1,) * (len(a) - len(b))) + b):
        if x != y and 1 not in (x, y):
            raise TypingError(f"shapes {a} and {b} do not broadcast",
                              help="make the axes equal, or 1 on one side (ts.expand_dims / ts.reshape)")
        out.append(y if x == 1 else x)
    return tuple(out)


def is_power_of_two(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def check_tile_shape(shape, what: str = "tile shape") -> tuple[int, ...]:
    if not isinstance(shape, tuple):
        shape = (shape,)
    for n in shape:
        if not is_power_of_two(n):
            nxt = 1 if not isinstance(n, int) or n < 1 else 1 << (n - 1).bit_length()
            raise TypingError(f"{what} {shape} has {n!r}, which is not a power of two",
                              help=f"tile shapes are static powers of two: use {nxt} and let the edge be masked")
    return tuple(shape)
