"""Views that present any tensor to a kernel of fixed rank, without copying.

Kernels here have outputs of rank 3 (the most a partition has). A call's tensors of any
rank are shown to them as rank-3 views over the same storage: axes of size 1 are dropped,
adjacent axes that are contiguous with each other *in every tensor of the call* are merged,
and the result is padded with leading 1s. Broadcasting is a stride-0 view (never
materialised); Ref loads follow strides, so a broadcast operand costs no memory.

Views are built on the tensor's own storage state, so initialisation (S14) and ordering
(S9/S10) are tracked by bytes exactly as for `x.view(...)`.
"""
from __future__ import annotations

import itertools

import torch

from ..runtime.tensor import Tensor


def strided(t: Tensor, shape, strides) -> Tensor:
    """The view of `t`'s storage with `shape` and element `strides`, at `t`'s first element."""
    t._check_usable("a kernel argument")
    base = t._torch()
    return Tensor(base.as_strided(tuple(shape), tuple(strides), base.storage_offset()), t._state)


def broadcast(t: Tensor, shape) -> Tensor | None:
    """`t` expanded to `shape` by NumPy rules (stride 0 on new and size-1 axes); None if impossible."""
    try:
        return Tensor(t._torch().expand(tuple(shape)), t._state)
    except RuntimeError:
        return None


def same_view(a: Tensor | torch.Tensor, b: Tensor | torch.Tensor) -> bool:
    """Whether two handles are the same elements of the same memory (an in-place call).
    Torch tensors are taken too: a cached call plan asks before borrowing them (call_plans)."""
    ta = a._t if isinstance(a, Tensor) else a
    tb = b._t if isinstance(b, Tensor) else b
    return (ta.data_ptr() == tb.data_ptr() and ta.get_device() == tb.get_device() and ta.shape == tb.shape
            and ta.stride() == tb.stride() and ta.dtype == tb.dtype)


def merge_axes(shape, strides_of, keep_last: bool = False):
    """Drop size-1 axes and merge neighbours that are contiguous in every tensor.

    `strides_of` holds one stride tuple per tensor, all for `shape`. Returns the merged
    shape and strides. With `keep_last`, the last axis is never merged or dropped (row
    kernels reduce over it).
    """
    last = len(shape) - 1 if keep_last else None
    axes = [a for a in range(len(shape)) if shape[a] != 1 or a == last]
    sizes = [shape[a] for a in axes]
    strides = [[s[a] for a in axes] for s in strides_of]
    i = len(sizes) - 2
    while i >= 0:
        if keep_last and i + 1 == len(sizes) - 1:
            i -= 1
            continue
        if all(st[i] == st[i + 1] * sizes[i + 1] for st in strides):
            sizes[i] *= sizes[i + 1]
            del sizes[i + 1]
            for st in strides:
                st[i] = st[i + 1]
                del st[i + 1]
        i -= 1
    return tuple(sizes), [tuple(st) for st in strides]


def rank3(tensors, shape, keep_last: bool = False) -> list[Tensor] | None:
    """Rank-3 views of `tensors` (each of `shape`, broadcast views included); None when
    their layouts do not merge into three axes."""
    sizes, strides = merge_axes(tuple(shape), [t._torch().stride() for t in tensors], keep_last)
    if len(sizes) > 3:
        return None
    pad = 3 - len(sizes)
    sizes = (1,) * pad + sizes
    return [strided(t, sizes, (0,) * pad + st) for t, st in zip(tensors, strides)]


def slabs3(tensors, shape) -> list[list[Tensor]]:
    """Like `rank3`, for layouts that merge into more than three axes: one list of rank-3
    views per index of the outer axes (the caller launches once per slab)."""
    sizes, strides = merge_axes(tuple(shape), [t._torch().stride() for t in tensors])
    outer, inner = sizes[:-3], sizes[-3:]
    slabs = []
    for index in itertools.product(*(range(n) for n in outer)):
        views = []
        for t, st in zip(tensors, strides):
            base = t._torch()
            offset = base.storage_offset() + sum(i * s for i, s in zip(index, st))
            views.append(Tensor(base.as_strided(inner, st[-3:], offset), t._state))
        slabs.append(views)
    return slabs


def rows3(inputs, outputs, row_shape) -> tuple[list[Tensor], list[Tensor]] | None:
    """Views for a row kernel. Every tensor's leading axes are `row_shape[:-1]`: a tensor
    of shape (*lead, n) becomes (A, B, n) (its own n), one of shape `lead` (per-row results)
    becomes (A, B). The leading axes are merged jointly over all tensors; None when they
    need more than two.
    """
    lead = tuple(row_shape[:-1])
    tensors = (*inputs, *outputs)
    sizes, strides = merge_axes(lead, [t._torch().stride()[:len(lead)] for t in tensors])
    if len(sizes) > 2:
        return None
    pad = 2 - len(sizes)
    sizes = (1,) * pad + sizes
    views = []
    for t, st in zip(tensors, strides):
        full, st = t._torch(), (0,) * pad + st
        if full.dim() == len(lead) + 1:
            views.append(strided(t, sizes + (full.shape[-1],), st + (full.stride()[-1],)))
        else:
            views.append(strided(t, sizes, st))
    return views[:len(inputs)], views[len(inputs):]


def matrices(tensors) -> list[Tensor] | None:
    """2-D views (M, n_i) of tensors of shapes (*lead, n_i) sharing `lead`; None when the
    leading axes do not merge into one."""
    lead = tuple(tensors[0]._torch().shape[:-1])
    views = rows3(tensors, [], lead + (1,))
    if views is None or views[0][0].shape[0] != 1:
        return None
    out = []
    for v in views[0]:
        base = v._torch()
        out.append(strided(v, tuple(base.shape[1:]), tuple(base.stride()[1:])))
    return out


def split_axis(t: Tensor, axis: int, outer: int) -> Tensor:
    """Split `axis` of `t` into (outer, size // outer): always a view."""
    base = t._torch()
    shape, strides = list(base.shape), list(base.stride())
    inner = shape[axis] // outer
    shape[axis:axis + 1] = [outer, inner]
    strides[axis:axis + 1] = [strides[axis] * inner, strides[axis]]
    return strided(t, shape, strides)


def leading(t: Tensor, rank: int) -> Tensor:
    """`t` with leading size-1 axes added up to `rank`."""
    base = t._torch()
    pad = rank - base.dim()
    return strided(t, (1,) * pad + tuple(base.shape), (0,) * pad + tuple(base.stride()))


_ = torch
