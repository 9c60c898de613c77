"""The device-side language: documented stubs.

Each function here is what a kernel calls (`ts.exp(x)`); its meaning lives in the frontend's
op registry (`lowering.py`), the reference interpreter and the Triton code generator. Called
on the host, a stub explains how to use it instead. Host constructors that share a name
(`ts.zeros`, `ts.full`, `ts.arange`, `ts.rand`) are registered for the device side in
`runtime/constructors.py`.
"""
from __future__ import annotations

import functools

from ..errors import KernelError, caller_loc


def stub(fn):
    @functools.wraps(fn)
    def host_call(*args, **kwargs):
        raise KernelError(f"`ts.{fn.__name__}` is a device-side operation and only works inside a @ts.kernel",
                          loc=caller_loc(),   # the user's host line, not this stub
                          help="call it from a function decorated with @ts.kernel (or @ts.function)")
    host_call.__tilesafe_stub__ = fn.__name__
    return host_call


# --- launch geometry ---------------------------------------------------------------------
@stub
def block_id(axis: int):
    """This block's index along grid `axis` (i32). `i = ts.block_id(0)`"""


@stub
def num_blocks(axis: int):
    """The grid's size along `axis` (i32). `n = ts.num_blocks(0)`"""


# --- elementwise math ------------------------------------------------------------------
@stub
def where(cond, a, b):
    """Elementwise `a if cond else b`, broadcasting. `y = ts.where(x > 0, x, 0.0)`"""


@stub
def maximum(a, b):
    """Elementwise maximum. `y = ts.maximum(x, 0.0)`"""


@stub
def minimum(a, b):
    """Elementwise minimum. `y = ts.minimum(x, 1.0)`"""


@stub
def exp(x):
    """e**x (computed in f32 for half types). `y = ts.exp(x)`"""


@stub
def exp2(x):
    """2**x. `y = ts.exp2(x)`"""


@stub
def log(x):
    """Natural logarithm. `y = ts.log(x)`"""


@stub
def log2(x):
    """Base-2 logarithm. `y = ts.log2(x)`"""


@stub
def sqrt(x):
    """Square root. `y = ts.sqrt(x)`"""


@stub
def rsqrt(x):
    """1 / sqrt(x). `y = ts.rsqrt(ms + eps)`"""


@stub
def sin(x):
    """Sine. `y = ts.sin(x)`"""


@stub
def cos(x):
    """Cosine. `y = ts.cos(x)`"""


@stub
def tanh(x):
    """Hyperbolic tangent (an exp-based form on every backend). `y = ts.tanh(x)`"""


@stub
def sigmoid(x):
    """1 / (1 + exp(-x)). `y = ts.sigmoid(x)`"""


@stub
def erf(x):
    """The error function (a polynomial form on every backend). `y = ts.erf(x)`"""


@stub
def abs(x):
    """Absolute value. `y = ts.abs(x)`"""


@stub
def floor(x):
    """Round toward -inf (floats). `y = ts.floor(x)`"""


@stub
def ceil(x):
    """Round toward +inf (floats). `y = ts.ceil(x)`"""


@stub
def fma(a, b, c):
    """a * b + c. `y = ts.fma(x, w, b)`"""


@stub
def astype(x, dtype):
    """Convert, rounding to nearest-even and saturating. `h = ts.astype(x, ts.bf16)`"""


# --- reductions and scans ----------------------------------------------------------------
@stub
def sum(x, axis=None, keepdims=False):
    """Sum over `axis` (all axes when None). `s = ts.sum(x, axis=1)`"""


@stub
def max(x, axis=None, keepdims=False):
    """Maximum over `axis`. `m = ts.max(x, axis=1, keepdims=True)`"""


@stub
def min(x, axis=None, keepdims=False):
    """Minimum over `axis`. `m = ts.min(x, axis=0)`"""


@stub
def argmax(x, axis, keepdims=False):
    """Index of the maximum along `axis` (i32; the first on ties). `i = ts.argmax(x, 0)`"""


@stub
def argmin(x, axis, keepdims=False):
    """Index of the minimum along `axis` (i32; the first on ties). `i = ts.argmin(x, 0)`"""


@stub
def cumsum(x, axis=0):
    """Inclusive prefix sum along `axis`. `c = ts.cumsum(x, 0)`"""


# --- matrix multiply -------------------------------------------------------------------
@stub
def mma(a, b, acc, precision=None):
    """acc + a @ b on tensor cores; returns the new accumulator. `acc = ts.mma(a, b, acc)`

    fp32 inputs are IEEE fp32 unless `precision="tf32"`; bf16/fp16 accumulate in `acc`'s dtype.
    """


@stub
def dot(a, b, precision=None):
    """a @ b with an fp32 (float inputs) or i32 (int8 inputs) result. `c = ts.dot(a, b)`"""


# --- shape manipulation -----------------------------------------------------------------
@stub
def reshape(x, shape):
    """Same elements, new static shape. `y = ts.reshape(x, (16, 8))`"""


@stub
def permute(x, dims):
    """Reorder axes. `y = ts.permute(x, (1, 0))`"""


@stub
def transpose(x, dims=None):
    """Swap the two axes of a 2-D tile (or permute by `dims`). `y = ts.transpose(x)`"""


@stub
def broadcast_to(x, shape):
    """Repeat along size-1 axes. `y = ts.broadcast_to(row, (64, 128))`"""


@stub
def expand_dims(x, axis):
    """Insert a size-1 axis. `col = ts.expand_dims(v, 1)`"""


@stub
def join(a, b):
    """Stack two equal-shape tiles along a new last axis of size 2. `y = ts.join(re, im)`"""


@stub
def scalar(x):
    """A one-element tile as a scalar. `s = ts.scalar(ts.sum(x))`"""


# --- memory: tile-space loads ---------------------------------------------------------------
@stub
def load(x, index, shape, padding=0):
    """Load the tile `index` (counted in tiles) of shape `shape` from a ts.Ref.

    `a = ts.load(x, (i, k), shape=(64, 32))` reads x[i*64:(i+1)*64, k*32:(k+1)*32]; elements
    outside x read `padding`.
    """


@stub
def load_tile_like(x, out, padding=0):
    """Load the tile of `x` at this block's position in output `out`. `t = ts.load_tile_like(x, z)`"""


@stub
def gather(x, idx, axis=0, shape=None, index=None, padding=0):
    """Read `x` at positions `idx` (an integer tile) along `axis`; out-of-range positions read `padding`.

    `rows = ts.gather(table, ids, axis=0, shape=(1, 128), index=(0, j))`
    """


@stub
def num_tiles(view, axis):
    """How many tiles a device-side partition has along `axis`. `n = ts.num_tiles(px, 1)`"""


@stub
def valid(tile):
    """The in-bounds mask (bool tile) of a tile that was loaded. `m = ts.valid(t)`"""


# --- the last block of a group (S16) ---------------------------------------------------------
@stub
def last_arrival():
    """True in exactly one block of each group (the blocks that share every grid index but
    axis 0), once every block of the group has stored its `ts.Mut` tiles. Only as the
    condition of the kernel's last statement: `if ts.last_arrival(): ...`, where
    `for s in part.members(): part.load(s)` reads the group's tiles and a `ts.MutLast`
    output is stored."""


# --- compile-time helpers and debugging -------------------------------------------------------
@stub
def static_assert(cond, msg=""):
    """Fail compilation when a compile-time condition is false. `ts.static_assert(B % 16 == 0)`"""


@stub
def print(fmt, *values):
    """Print from the device (every block prints). `ts.print("m", m)`"""


# --- unsafe: pointers and atomics (only in @ts.kernel(unsafe=True)) ----------------------------
@stub
def load_ptr(p, offsets, mask=None, other=0):
    """Read `p[offsets]` where `mask` (unsafe kernels only). `v = ts.load_ptr(p, offs, mask=offs < n)`"""


@stub
def store_ptr(p, offsets, values, mask=None):
    """Write `p[offsets] = values` where `mask` (unsafe kernels only)."""


@stub
def atomic_add(p, offsets, values, mask=None):
    """Atomically add and return the old values (unsafe kernels only)."""


@stub
def atomic_max(p, offsets, values, mask=None):
    """Atomic maximum, returning the old values (unsafe kernels only)."""


@stub
def atomic_min(p, offsets, values, mask=None):
    """Atomic minimum, returning the old values (unsafe kernels only)."""


@stub
def atomic_cas(p, offsets, cmp, values):
    """Atomic compare-and-swap, returning the old values (unsafe kernels only)."""


UNSAFE_OPS = ("load_ptr", "store_ptr", "atomic_add", "atomic_max", "atomic_min", "atomic_cas")
