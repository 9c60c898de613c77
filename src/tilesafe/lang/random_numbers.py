"""`ts.rand(seed, offsets)` inside a kernel: counter-based random numbers.

The generator is Philox 4x32-10 (Salmon et al., SC'11), the one Triton's `tl.rand` runs: the
result at each offset is a pure function of (seed, offset), so a kernel draws the same
numbers whatever its grid, tiling or backend, and no generator state lives in memory. The
meaning is fixed by `backends/reference/philox.py`; the Triton backend lowers to `tl.rand`,
which computes the same bits. The host constructor `ts.rand(shape, ...)` shares the name
(as `ts.zeros` does); `runtime/constructors.py` registers this handler for its device side.
"""
from __future__ import annotations

from .. import dtypes as dt
from .builder import Builder, describe
from .ir import TileType, Value

# Counters and keys are 32-bit words: an i64 offset feeds its high word into the second
# counter, an i64 seed its high word into the second key. Narrower ints are refused rather
# than sign-extended silently.
_INT_KINDS = (dt.i32, dt.i64)


def rand_handler(b: Builder, node, seed, offsets):
    s = _int_operand(b, node, seed, "seed", scalar=True)
    o = _int_operand(b, node, offsets, "offsets", scalar=False)
    return b.emit1("rand", (s, o), TileType(o.shape, dt.f32))


def _int_operand(b: Builder, node, x, what: str, scalar: bool) -> Value:
    if isinstance(x, int) and not isinstance(x, bool):
        if not -2**63 <= x < 2**63:
            raise b.error(node, f"the {what} of ts.rand must fit in 64 bits, got {x}")
        return b.const(x)
    if isinstance(x, Value) and isinstance(x.type, TileType) and x.dtype in _INT_KINDS:
        if scalar and x.shape != ():
            raise b.error(node, f"the seed of ts.rand must be a scalar, got a {x.type} tile",
                          help="use one seed per call (ts.scalar(t) turns a one-element tile into a scalar)")
        return x
    shape = "an i32 or i64 scalar" if scalar else "an i32 or i64 tile (or scalar)"
    raise b.error(node, f"the {what} of ts.rand must be {shape}, got {describe(x)}",
                  help=f"convert it with ts.astype({what}, ts.i32) (or ts.i64)")
