"""The one TMA helper the raw Triton twins share (plain Triton, as a user would write it)."""
import triton
import triton.language as tl


@triton.jit
def descriptor_or_pointer(ptr, rows, cols, row_stride, BR: tl.constexpr, BC: tl.constexpr, USE: tl.constexpr):
    """A TMA descriptor of the row-major (rows, cols) matrix at `ptr` with (BR, BC) boxes
    when USE, else the pointer itself (the twin then loads through pointers)."""
    if USE:
        return tl.make_tensor_descriptor(ptr, shape=[rows, cols], strides=[row_stride, 1], block_shape=[BR, BC])
    else:
        return ptr
