"""A plain read of a buffer, the ceiling a weight-streaming GEMV is compared with: each
program sums its contiguous chunk in fp32 and writes one number, so the traffic is the
buffer's bytes alone."""
import triton
import triton.language as tl

from .launch import cdiv, launch

BLOCK, PER = 2048, 8           # elements per load, loads per program


@triton.jit
def read(out_ptr, x_ptr, n, BLOCK: tl.constexpr, PER: tl.constexpr):
    base = tl.program_id(0) * BLOCK * PER
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(PER):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


def partials(n: int) -> int:
    """The number of partial sums `read_all` writes for a buffer of n elements."""
    return cdiv(n, BLOCK * PER)


def read_all(out, x):
    """Sum x (any contiguous tensor) into `out[i]` per chunk; `out` has `partials(x.numel())` floats."""
    n = x.numel()
    launch(read, (partials(n),), out, x, n, BLOCK=BLOCK, PER=PER)
    return out
