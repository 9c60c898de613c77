"""Twins of the elementwise kernels (`binary_kernel`: add, silu_mul) over contiguous operands.

The library shows contiguous operands to a rank-3 kernel as one long axis, (1, 1, N) with
a (1, 1, B) tile; the twin is the 1-D kernel a Triton user writes for that: B elements per
program, a mask only when N does not divide by B.
"""
import triton
import triton.language as tl

from .launch import cdiv, launch

ADD, SILU_MUL = 0, 4          # the library's op codes (tilesafe.kernels.elementwise)


@triton.jit
def binary(z_ptr, x_ptr, y_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        a = tl.load(x_ptr + offs).to(tl.float32)
        b = tl.load(y_ptr + offs).to(tl.float32)
    else:
        a = tl.load(x_ptr + offs, mask=offs < n).to(tl.float32)
        b = tl.load(y_ptr + offs, mask=offs < n).to(tl.float32)
    if OP == 0:
        r = a + b
    else:
        r = a * tl.sigmoid(a) * b
    if EVEN:
        tl.store(z_ptr + offs, r.to(z_ptr.dtype.element_ty))
    else:
        tl.store(z_ptr + offs, r.to(z_ptr.dtype.element_ty), mask=offs < n)


def binary_twin(seen, op: int):
    """The twin of the `binary_kernel` launch in `seen`: `run(z, x, y)` for contiguous tensors."""
    facts = seen["binary_kernel"]
    block = facts.tile_elems("B0", "B1", "B2")

    def run(z, x, y):
        n = z.numel()
        launch(binary, (cdiv(n, block),), z, x, y, n, options=facts.options, OP=op, BLOCK=block,
               EVEN=n % block == 0)
        return z
    return run
