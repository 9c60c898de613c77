"""The arguments of a library call: tensors in, validation, outputs out.

Every library function takes tilesafe tensors or torch tensors. Torch in gives torch out:
the output is allocated by torch and borrowed with `ts.from_torch`, so handing it back
costs no wait. With `out=` nothing is allocated and `out` itself is returned, which is
what makes a call capturable in `ts.graph()`. Wrong arguments are `ts.LaunchError`s that
point at the user's call, never a bare assert.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import dtypes
from . import layout
from .call_checks import refuse_autograd
from .call_recording import ACTIVE
from ..dtypes import DType
from ..errors import LaunchError, caller_loc
from ..runtime.constructors import empty, from_torch
from ..runtime.graph import refuse_allocation
from ..runtime.tensor import Tensor

FLOATS = (dtypes.f32, dtypes.f16, dtypes.bf16)
INTS = (dtypes.i32, dtypes.i64)


def fail(fn: str, message: str, help: str | None = None) -> LaunchError:
    """A LaunchError located at the user's call of `fn`."""
    return LaunchError(f"{fn}: {message}", loc=caller_loc(), help=help)


def is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


def tensor(x, name: str, fn: str, differentiable: bool = True) -> Tensor:
    """`x` as a tilesafe tensor (a torch tensor is borrowed, not copied). A torch tensor
    that autograd tracks is refused where torch's result would be `differentiable` in it
    (not for an argmax or a workspace's shape: no gradient is dropped there)."""
    if isinstance(x, Tensor):
        return x
    if is_torch(x):
        if differentiable:
            refuse_autograd(x, name, fn)
        return from_torch(x)
    raise fail(fn, f"`{name}` must be a tilesafe or torch tensor, got {type(x).__name__}",
               help="make one with ts.tensor(array) or pass a torch.Tensor")


def dtype_in(t: Tensor, allowed, name: str, fn: str) -> DType:
    if t.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise fail(fn, f"`{name}` has dtype {t.dtype.name}; this function takes {names}",
                   help=f"convert it first, e.g. ts.tensor(x, dtype=ts.{allowed[0].name})")
    return t.dtype


def same_dtype(fn: str, **named: Tensor) -> DType:
    return _agree(fn, named, lambda t: t.dtype, lambda n, v, first, w: f"`{n}` has dtype {v.name} but `{first}` "
                  f"has {w.name}", "convert both to one dtype first")


def same_device(fn: str, **named: Tensor) -> str:
    return _agree(fn, named, lambda t: t.device, lambda n, v, first, w: f"`{n}` is on {v} but `{first}` is on {w}",
                  "move every tensor of one call to the same device")


def _agree(fn: str, named: dict, key, message, help: str):
    """key(t) of the first tensor, after checking every other tensor has the same."""
    items = list(named.items())
    first, want = items[0][0], key(items[0][1])
    for name, t in items[1:]:
        if key(t) != want:
            raise fail(fn, message(name, key(t), first, want), help=help)
    return want


def float_operands(fn: str, **named) -> tuple[list[Tensor], DType, str]:
    """The named arguments as tensors of one float dtype on one device: (tensors, dtype, device)."""
    tensors = {name: tensor(x, name, fn) for name, x in named.items()}
    first = next(iter(tensors))
    dtype = dtype_in(tensors[first], FLOATS, first, fn)
    same_dtype(fn, **tensors)
    return list(tensors.values()), dtype, same_device(fn, **tensors)


def int_vector(fn: str, x, name: str, n: int, device: str) -> Tensor:
    """An (n,) int32/int64 tensor on `device` (slot mappings, sequence lengths)."""
    t = tensor(x, name, fn)
    dtype_in(t, INTS, name, fn)
    if t.shape != (n,) or t.device != device:
        raise fail(fn, f"`{name}` must be ({n},) on {device}; got {t.shape} on {t.device}")
    return t


def bias_vector(fn: str, bias, n: int, a_view: Tensor) -> Tensor:
    """A GEMM's (n,) bias; without one, a stand-in 1-D view of a (never read: HAS_BIAS is False)."""
    if bias is None:
        return a_view[0]
    bt = tensor(bias, "bias", fn)
    dtype_in(bt, FLOATS, "bias", fn)
    same_device(fn, a=a_view, bias=bt)
    if bt.shape != (n,):
        raise fail(fn, f"`bias` must have shape ({n},), got {bt.shape}")
    return bt


def tf32(fn: str, dtype: DType, precision) -> bool:
    """tf32 products for fp32 inputs: `precision` "tf32"/"high"/"medium", or torch's default."""
    if precision is None:
        precision = torch.get_float32_matmul_precision()
    if precision not in ("ieee", "highest", "tf32", "high", "medium"):
        raise fail(fn, f"precision must be \"ieee\" or \"tf32\" (or torch's \"highest\"/\"high\"/\"medium\"), "
                       f"got {precision!r}")
    return dtype == dtypes.f32 and precision in ("tf32", "high", "medium")


def row_views(fn: str, inputs, outputs, shape):
    """`layout.rows3` of a row kernel's tensors, or the error when their leading axes do not merge."""
    views = layout.rows3(inputs, outputs, shape)
    if views is None:
        raise fail(fn, f"the leading axes of shape {shape} do not merge into two", help="pass a contiguous tensor")
    return views


def rank_in(t: Tensor, ranks, name: str, fn: str) -> int:
    if t.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise fail(fn, f"`{name}` must have rank {want}, got shape {t.shape}")
    return t.ndim


def float_dtype(d, fn: str, what: str = "out_dtype") -> DType:
    try:
        d = dtypes.coerce(d)
    except (ValueError, TypeError):
        d = None
    if d not in FLOATS:
        raise fail(fn, f"{what} must be one of {', '.join(x.name for x in FLOATS)}, got {d!r}")
    return d


@dataclass(slots=True)
class Output:
    """An output buffer: the tilesafe view kernels write, and what the call returns."""
    tensor: Tensor
    returned: object        # `out` as passed, a torch tensor (torch mode) or `tensor`
    given: bool = False     # the caller passed it (a fresh buffer cannot alias anything)

    @property
    def passed(self) -> Tensor | None:
        """The tensor when the caller passed it, for `call_checks.check_aliasing`; else None."""
        return self.tensor if self.given else None


def output(out, shape, dtype: DType, device: str, torch_mode: bool, fn: str, name: str = "out") -> Output:
    """`out` checked against (shape, dtype, device), or a fresh buffer when it is None."""
    shape = tuple(shape)
    if out is None:
        refuse_allocation(fn, name)   # S12: a capture may not allocate; the caller passes out=
        if torch_mode:
            t = torch.empty(shape, dtype=dtype.torch, device=device)
            o = Output(from_torch(t), t)
        else:
            t = empty(shape, dtype, device)
            o = Output(t, t)
        if (rec := ACTIVE.get()) is not None:      # a call plan allocates it again (call_recording)
            rec.allocated(o.tensor, o.returned, (shape, dtype, device, torch_mode))
        return o
    t = tensor(out, name, fn)
    if t.shape != shape or t.dtype != dtype:
        raise fail(fn, f"`{name}` has shape {t.shape} and dtype {t.dtype.name}, but the result is "
                       f"{shape} {dtype.name}", help=f"pass {name}=ts.empty({shape}, ts.{dtype.name})")
    if t.device != device:
        raise fail(fn, f"`{name}` is on {t.device} but the inputs are on {device}")
    return Output(t, out, True)


def empty_scratch(shape, dtype: DType, device: str) -> Tensor:
    """`ts.empty` for a call's own intermediate results (a workspace made for the call)."""
    t = empty(shape, dtype, device)
    if (rec := ACTIVE.get()) is not None:
        rec.allocated(t, None, (tuple(shape), dtype, device, False))
    return t


def axis_last(fn: str, t: Tensor, axis, dim) -> tuple[Tensor, int]:
    """`t` viewed with the axis a call works on (`axis=` or `dim=`, default the last) moved
    last, and that axis (non-negative): kernels over rows then serve any axis, by strides."""
    axis, word = axis_or_dim(fn, axis, dim)
    rank = t.ndim
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise fail(fn, f"{word} {axis!r} is out of range for shape {t.shape}",
                   help=f"pass an int in {-rank}..{rank - 1}")
    axis %= rank
    return moved_last(t, axis), axis


def moved_last(t: Tensor, axis: int) -> Tensor:
    """A view of `t` with `axis` moved last (the others keep their order)."""
    if axis == t.ndim - 1:
        return t
    return t.permute(*[a for a in range(t.ndim) if a != axis], axis)


def axis_or_dim(fn: str, axis, dim, default: int = -1) -> tuple[int, str]:
    """The axis a call works on and the name the caller gave it: `axis=` (NumPy) or `dim=`
    (PyTorch) are one argument under two names, so passing both is refused."""
    if axis is not None and dim is not None:
        raise fail(fn, f"got both axis={axis!r} and dim={dim!r}; they name the same argument",
                   help="pass one of them (dim= as in PyTorch, or axis= as in NumPy)")
    if dim is not None:
        return dim, "dim"
    return (default, "dim") if axis is None else (axis, "axis")
