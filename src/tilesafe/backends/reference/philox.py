"""Philox 4x32-10 and its uniform floats: the meaning of `ts.rand(seed, offsets)`.

Counter (offset low word, offset high word, 0, 0), key (seed low word, seed high word), ten
rounds; the first output word, read as a signed i32 and folded onto [0, 2**31) (x if x >= 0
else -x - 1), times the f32 constant 4.6566127342e-10, the largest scale that keeps
(2**31 - 1) * scale below 1 after rounding. This is what Triton's `tl.rand` computes, bit for
bit, so the interpreter and the Triton backend draw the same numbers.
"""
from __future__ import annotations

import numpy as np

ROUND_A, ROUND_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)   # round multipliers
KEY_A, KEY_B = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)       # Weyl key increments
ROUNDS = 10
SCALE = np.float32(4.6566127342e-10)
_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def uniform(seed, offsets) -> np.ndarray:
    """f32 values in [0, 1), one per offset (an i32/i64 array or scalar)."""
    word = first_word(seed, offsets)
    signed = word.view(np.int32)
    folded = np.where(signed < 0, ~signed, signed)          # -x - 1 == ~x, without overflow
    return (folded.astype(np.float32) * SCALE).astype(np.float32)


def first_word(seed, offsets) -> np.ndarray:
    """The first u32 output word of Philox 4x32-10 for counters (offset, 0, 0) and key seed."""
    off = np.asarray(offsets)
    wide = off.astype(np.int64).astype(np.uint64)            # two's complement bits
    c0 = (wide & _LOW).astype(np.uint32)
    c1 = (wide >> _32).astype(np.uint32) if off.dtype.itemsize > 4 else np.zeros_like(c0)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    key = np.asarray(int(seed)).astype(np.int64).astype(np.uint64)
    k0, k1 = np.uint32(key & _LOW), np.uint32(key >> _32)
    with np.errstate(over="ignore"):
        for _ in range(ROUNDS):
            hi_lo0 = ROUND_B * c2.astype(np.uint64)
            hi_lo1 = ROUND_A * c0.astype(np.uint64)
            c0, c1, c2, c3 = ((hi_lo0 >> _32).astype(np.uint32) ^ c1 ^ k0, (hi_lo0 & _LOW).astype(np.uint32),
                              (hi_lo1 >> _32).astype(np.uint32) ^ c3 ^ k1, (hi_lo1 & _LOW).astype(np.uint32))
            k0, k1 = np.uint32(k0 + KEY_A), np.uint32(k1 + KEY_B)
    return c0
