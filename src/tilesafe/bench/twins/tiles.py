"""Row-major tile accesses the row and reduction twins share: unmasked when the launch's
extents divide by the tiles (`EVEN`, as a hand-written kernel's flag), masked otherwise."""
import triton
import triton.language as tl


@triton.jit
def load_rows(ptr, rm, cols, M, N, stride, EVEN: tl.constexpr, PAD: tl.constexpr):
    """Rows rm, columns cols of a matrix with unit column stride, as fp32; PAD past M and N."""
    ptrs = ptr + rm[:, None] * stride + cols[None, :]
    if EVEN:
        t = tl.load(ptrs)
    else:
        t = tl.load(ptrs, mask=(rm[:, None] < M) & (cols[None, :] < N), other=PAD)
    return t.to(tl.float32)


@triton.jit
def store_rows(ptr, y, rm, cols, M, N, stride, EVEN: tl.constexpr):
    """y, cast to the matrix's dtype, into rows rm, columns cols."""
    ptrs = ptr + rm[:, None] * stride + cols[None, :]
    if EVEN:
        tl.store(ptrs, y.to(ptr.dtype.element_ty))
    else:
        tl.store(ptrs, y.to(ptr.dtype.element_ty), mask=(rm[:, None] < M) & (cols[None, :] < N))


@triton.jit
def load_vector(ptr, rn, N, EVEN: tl.constexpr):
    """Elements rn of a vector as fp32, zero past N."""
    if EVEN:
        v = tl.load(ptr + rn)
    else:
        v = tl.load(ptr + rn, mask=rn < N, other=0.0)
    return v.to(tl.float32)
