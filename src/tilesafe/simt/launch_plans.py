"""The launch fast path: a repeated launch with the same layout skips what only the layout decides.

A plan is keyed by the arguments' layout: each tensor's data pointer, shape, strides, dtype and
device, and each scalar's value. Those decide the binding (dtypes, ranks, named extents), the
grid, the `Const` values, the aliasing verdict (S7: byte ranges follow from pointer, shape and
strides), the device's capability and the compiled kernel. What can change between two
launches with the same layout is checked again on every launch: a torch tensor is borrowed
again (S13, which also notices torch's writes), a tilesafe tensor may have been lent or handed
over since (S8), and what is read must have been written (S14). Fresh torch tensors that the
caching allocator placed at the same addresses hit the plan.
"""
from __future__ import annotations

import torch

from ..errors import OwnershipError
from ..runtime.binding import ArgFacts, Bound
from ..runtime.tensor import Tensor
from .params import WRITTEN

MAX_PLANS = 64


def layout(args, kwargs, grid):
    """(key, seen): the layout of a launch's arguments, or (None, None) when an argument has none we
    can key on. `seen` lists, for the positional and then the (sorted) keyword arguments, each
    tensor's (argument, torch view, storage), or None for a scalar: the repeated GPU launch reads
    them from here instead of asking torch again. A tensor's key holds its storage's address and
    size too, so its byte set (aliasing.byte_set) is a function of the key and a plan can keep it."""
    key = [grid, len(args)]
    seen = []
    for a in args:
        part = _part(a, seen)
        if part is None:
            return None, None
        key.append(part)
    if kwargs:
        for name in sorted(kwargs):
            part = _part(kwargs[name], seen)
            if part is None:
                return None, None
            key.append((name, part))
    return tuple(key), seen


def _part(a, seen):
    if isinstance(a, Tensor):
        t = a._torch()
    elif isinstance(a, torch.Tensor):
        t = a
    elif type(a) in (int, float, bool):
        seen.append(None)
        return (type(a), a)
    else:
        return None
    if t.layout is not torch.strided or t.is_meta:
        return None              # no storage to key on: binding refuses it with its own error
    st = t.untyped_storage()
    seen.append((a, t, st))
    return (type(a), t.data_ptr(), st.data_ptr(), st.nbytes(), t.shape, t.stride(), t.dtype, t.device)


class LaunchPlan:
    """What a launch with this layout already proved, and where each argument comes from."""
    __slots__ = ("slots", "grid", "consts", "scalars", "outputs", "compiled", "err", "args", "config", "seen_at",
                 "repeat", "dynamic_shared", "masks")

    def __init__(self, kernel, bound, args, kwargs):
        names = [p.name for p in kernel.params]
        where = {name: ("kw", name) if name in kwargs else ("pos", names.index(name)) for name in names
                 if name in kwargs or names.index(name) < len(args)}
        self.slots = [(p.name, p.kind, p.dtype, where[p.name]) for p in kernel.params if p.is_tensor]
        self.grid, self.consts, self.scalars = bound.grid, dict(bound.consts), dict(bound.scalars)
        self.outputs = tuple(where[p.name] for p in kernel.params if p.kind in WRITTEN)
        kw = sorted(kwargs)       # where each tensor sits in layout()'s `seen`
        self.seen_at = {name: at if how == "pos" else len(args) + kw.index(at) for name, _, _, (how, at) in self.slots}
        self.repeat = None       # on a GPU, after the first launch: the lean repeated launch (gpu_repeat.py)
        self.compiled = None     # on a GPU: the compiled kernel, its error flag, its arguments in
        self.err = None          # numba's ABI (pointers, shapes and strides are in the key, so they
        self.args = None         # hold for every launch of the plan) and its launch configuration
        self.config = None
        self.dynamic_shared = 0  # bytes of dynamic shared memory per block (scalars are in the key)
        self.masks = {}          # on a GPU: an unsafe kernel's write mask per target (u8, the target's shape)

    def rebind(self, kernel, args, kwargs, is_written=None) -> Bound:
        """The bound arguments of this launch, with the per-launch checks done (S8, S13, S14).
        `is_written(state, view)`: S14's test (inside ts.graph(), the capture's own)."""
        from ..runtime.constructors import from_torch
        out = Bound(consts=self.consts, scalars=self.scalars, grid=self.grid)
        for name, kind, dtype, (how, at) in self.slots:
            a = kwargs[at] if how == "kw" else args[at]
            if isinstance(a, Tensor):
                a._check_usable(name)
            else:
                a = from_torch(a)
                out.borrowed.append(a)
            t = a._torch()
            if name in kernel.read_names and not (a._state.is_written(t) if is_written is None
                                                  else is_written(a._state, t)):
                raise OwnershipError(f"argument `{name}` of `{kernel.name}` is read, but it came from ts.empty "
                                     "and has not been written", help="write it first, or create it with ts.zeros")
            out.tensors[name] = ArgFacts(_Held(a), tuple(t.shape), t.stride(), dtype, None)
        return out

    def passed_outputs(self, args, kwargs) -> tuple:
        return tuple(kwargs[at] if how == "kw" else args[at] for how, at in self.outputs)


class _Held:
    """A strong reference with weakref's call syntax (ArgFacts.obj calls its ref)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __call__(self):
        return self.obj
