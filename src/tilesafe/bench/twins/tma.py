"""The TMA helpers the raw Triton twins share (plain Triton, as a user would write it)."""
from triton.tools.tensor_descriptor import TensorDescriptor


def descriptor_or_tensor(t, rows: int, cols: int, row_stride: int, box: tuple, use: bool):
    """A host-built TMA descriptor of the row-major (rows, cols) matrix at `t`'s address, with
    boxes of `box`, when `use`; else `t` itself (the twin then loads through pointers and
    never reads the argument). Built on the host as the tilesafe launch does."""
    if not use:
        return t
    return TensorDescriptor(t, [rows, cols], [row_stride, 1], list(box))


def whole_or_tensor(t, box: tuple, use: bool):
    """A host-built TMA descriptor of all of `t`, any rank, with boxes of `box` (one entry per
    axis), when `use`; else `t` itself, as `descriptor_or_tensor`."""
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(box)) if use else t
