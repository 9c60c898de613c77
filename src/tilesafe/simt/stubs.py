"""The device-side operations of a SIMT kernel, as documented stubs.

Inside a `@simt.kernel` these names are read by the analysis, run by the CPU executor and
lowered to numba-cuda; called anywhere else they say how to use them. The registry at the
bottom is the one list the three of them share.
"""
from __future__ import annotations

from ..errors import KernelError, caller_loc


def _outside(name: str):
    raise KernelError(f"simt.{name}() is a device-side operation: call it inside a @simt.kernel function",
                      caller_loc(), help="launch the kernel; on the host, use torch or ts operations")


def thread_id(axis: int = 0) -> int:
    """This thread's index within its block along `axis` (0 = x): `t = simt.thread_id()`."""
    _outside("thread_id")


def block_id(axis: int = 0) -> int:
    """This block's index within the grid along `axis` (0 = x)."""
    _outside("block_id")


def block_dim(axis: int = 0) -> int:
    """Threads per block along `axis` (the contract's block)."""
    _outside("block_dim")


def grid_dim(axis: int = 0) -> int:
    """Blocks in the grid along `axis`."""
    _outside("grid_dim")


def global_id() -> int:
    """The thread's global linear index along x: block_id(0) * block_dim(0) + thread_id(0)."""
    _outside("global_id")


def lane() -> int:
    """This thread's lane in its warp (0..31)."""
    _outside("lane")


def warp_id() -> int:
    """This thread's warp within its block."""
    _outside("warp_id")


def barrier() -> None:
    """End a phase: every thread of the block waits here (CUDA's __syncthreads()).

    Never under thread-dependent control flow; shared memory written before it may be read after it."""
    _outside("barrier")


def shared(shape, dtype):
    """A block's shared-memory array of a static `shape`: `s = simt.shared((256,), ts.f32)`.

    Written through its own permits (`for p in s.permits(simt.per_thread()): s[p] = v`), read after
    a `simt.barrier()`."""
    _outside("shared")


def shfl_down(value, delta: int):
    """The value of lane `lane() + delta` of this warp (this lane's own value past the end)."""
    _outside("shfl_down")


def shfl_xor(value, mask: int):
    """The value of lane `lane() ^ mask` of this warp."""
    _outside("shfl_xor")


def warp_sum(value):
    """The sum of `value` over the warp's 32 lanes, given to every lane."""
    _outside("warp_sum")


def warp_max(value):
    """The maximum of `value` over the warp's 32 lanes, given to every lane."""
    _outside("warp_max")


def ballot(predicate) -> int:
    """A 32-bit mask with bit i set where lane i's predicate is true."""
    _outside("ballot")


# -- the registry: what each name is to the analysis --------------------------------------------
# Thread-varying: their value differs between threads of a block.
VARYING = {"thread_id", "global_id", "lane", "warp_id"}
# Uniform within a block.
UNIFORM = {"block_id", "block_dim", "grid_dim"}
# Warp collectives: every lane of the warp must reach them together.
WARP_OPS = {"shfl_down", "shfl_xor", "warp_sum", "warp_max", "ballot"}
# Warp collectives whose result is the same in every lane.
WARP_UNIFORM = {"warp_sum", "warp_max", "ballot"}
MAPPINGS = {"per_thread", "run", "chunk", "grid_stride", "per_warp", "per_block", "at"}
DEVICE = VARYING | UNIFORM | WARP_OPS | {"barrier", "shared"}
