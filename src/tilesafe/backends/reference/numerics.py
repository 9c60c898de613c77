"""The numeric semantics of every tile op, defined on NumPy arrays.

This module *is* the specification of DESIGN §2's numeric rules: half types compute in f32
and round to nearest-even; `astype` saturates; integer `//` and `%` floor; erf and tanh use
the same closed forms the Triton backend emits.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType

NARROW_FLOATS = ("f16", "bf16", "f8e4m3fn", "f8e5m2")


def compute_dtype(d: DType) -> np.dtype:
    """The NumPy dtype arithmetic on `d` is carried out in."""
    if d.name in NARROW_FLOATS:
        return np.dtype(np.float32)
    return d.np


def up(x: np.ndarray, d: DType) -> np.ndarray:
    return np.asarray(x).astype(compute_dtype(d), copy=False)


def down(x, d: DType) -> np.ndarray:
    """Round a computed result to `d` (nearest-even for floats)."""
    return np.asarray(x).astype(d.np)


def cast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    x = np.asarray(x)
    if src == dst:
        return x
    if dst.is_bool:
        return x.astype(np.float32 if src.is_float else x.dtype) != 0
    if dst.is_float:
        y = x.astype(np.float64) if not src.is_float else x.astype(np.float32 if src.bits <= 32 else np.float64)
        if dst.name in ("f8e4m3fn", "f8e5m2", "bf16", "f16"):
            lo, hi = dt.finite_range(dst)
            if dst.name.startswith("f8"):   # GPUs convert with .satfinite: clip, keep NaN
                y = np.where(np.isnan(y), y, np.clip(y, lo, hi))
        return y.astype(dst.np)
    # to an integer
    if src.is_float:
        lo, hi = dt.finite_range(dst)
        y = np.trunc(x.astype(np.float64))
        y = np.where(np.isnan(y), 0, np.clip(y, lo, hi))
        # i64's max is no f64: `hi` rounds up to 2**63, which astype would wrap to the minimum.
        top = y >= 2.0 ** 63
        return np.where(top, np.iinfo(dst.np).max, np.where(top, 0, y).astype(dst.np))
    return x.astype(dst.np)   # int -> int wraps, as on the GPU


def binary(op: str, a, b, d: DType):
    x, y = up(a, d), up(b, d)
    with np.errstate(all="ignore"):
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        elif op == "/":
            r = x / y
        elif op == "//":
            r = _int_floordiv(x, y)
        elif op == "%":
            r = x - _int_floordiv(x, y) * y
        elif op == "&":
            r = x & y
        elif op == "|":
            r = x | y
        elif op == "^":
            r = x ^ y
        elif op == "<<":
            r = x << y
        elif op == ">>":
            r = x >> y
        elif op == "max":
            r = np.maximum(x, y)
        elif op == "min":
            r = np.minimum(x, y)
        else:
            raise NotImplementedError(op)
    return down(r, d)


def _int_floordiv(x, y):
    safe = np.where(y == 0, 1, y)
    return np.where(y == 0, 0, np.floor_divide(x, safe))


COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}


def compare(op: str, a, b, d: DType):
    return COMPARE[op](up(a, d), up(b, d))


def erf(x):
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), the form both backends use."""
    s = np.sign(x)
    ax = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * ax)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return s * (1.0 - poly * np.exp(-ax * ax))


def tanh(x):
    """tanh through exp, in the overflow-safe form the Triton backend emits."""
    e = np.exp(-2.0 * np.abs(x))
    return np.sign(x) * (1.0 - e) / (1.0 + e)


UNARY = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tanh": tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "erf": erf, "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "neg": np.negative,
}


def unary(op: str, a, d: DType):
    if op == "not":
        return np.logical_not(a)
    if op == "invert":
        return ~np.asarray(a)
    with np.errstate(all="ignore"):
        return down(UNARY[op](up(a, d)), d)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """Round f32 to tf32 (10 mantissa bits), nearest-even."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 13) & 1
    bits = (bits + 0xFFF + lsb) & ~np.uint64(0x1FFF)
    return bits.astype(np.uint32).view(np.float32)


def mma(a, b, acc, ab: DType, acc_d: DType, precision: str):
    if ab.is_int:
        return (a.astype(np.int64) @ b.astype(np.int64) + acc).astype(acc_d.np)
    x, y = a.astype(np.float32), b.astype(np.float32)
    if precision == "tf32":
        x, y = round_tf32(x), round_tf32(y)
    # f64 products of f32 operands are exact; summing in f64 stands in for any fp32 order.
    r = (x.astype(np.float64) @ y.astype(np.float64)) + acc.astype(np.float64)
    return r.astype(acc_d.np)


def reduce(op: str, a, axis: int, keepdims: bool, d: DType):
    x = up(a, d)
    if op == "sum":
        r = np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    elif op == "max":
        r = np.max(x, axis=axis, keepdims=keepdims)
    elif op == "min":
        r = np.min(x, axis=axis, keepdims=keepdims)
    elif op == "argmax":
        r = np.argmax(x, axis=axis, keepdims=keepdims).astype(np.int32)
        return r
    elif op == "argmin":
        r = np.argmin(x, axis=axis, keepdims=keepdims).astype(np.int32)
        return r
    else:
        raise NotImplementedError(op)
    return down(r, d)
