"""The launch fast path: a launch with a layout launched before skips what only the layout decides.

A plan is keyed by the arguments' layout, never by their addresses: each tensor's dtype, shape,
strides and device, each scalar's type and value, the grid. Those decide the binding (dtypes,
ranks, named extents), the grid, the `Const` values, the shared memory, the device's capability,
the compiled kernel and its parameters in numba's ABI but for the data pointers, and whether an
output overlaps itself. What the memory decides is checked on every launch, as the full path
checks it (memory_checks.py): a torch tensor is borrowed as `ts.from_torch` borrows it (S13,
which also notices torch's writes), a tilesafe tensor may have been lent or handed over since
(S8), an output shares no byte with another argument (S7: only arguments in one memory are
compared byte by byte) and what is read was written (S14). So fresh torch tensors hit the plan
wherever the caching allocator places them.
"""
from __future__ import annotations

import math

import torch

from ..runtime.binding import ArgFacts, Bound
from ..runtime.freeze import refuse_frozen_write
from ..runtime.tensor import Tensor
from .binding import StrongRef
from .memory_checks import alias_pairs, check_aliasing, refuse_unwritten, share_memory
from .params import WRITTEN

MAX_PLANS = 64


def layout(args, kwargs, grid):
    """(key, seen): the layout of a launch's arguments, or (None, None) when an argument has none we
    can key on. `seen` is the arguments, positional then keyword (sorted by name): the launch finds
    each tensor there by the plan's position. The key holds no address, so new memory in a known
    layout hits. Its parts are flat: a tensor's dtype, shape, strides and device; a scalar's type
    and value (a float's sign too); a keyword argument's part follows its name."""
    key = [tuple(grid) if type(grid) is list else grid, len(args)]    # bind takes a list grid as its tuple
    try:
        for a in args:
            tp = type(a)
            if tp is torch.Tensor:          # the common cases first, without a call
                key += (a.dtype, a.shape, a.stride(), a.device)
            elif tp is Tensor:
                t = a._t
                key += (t.dtype, t.shape, t.stride(), t.device)
            elif not _part(a, key):
                return None, None
        if not kwargs:
            return tuple(key), args
        names = sorted(kwargs)
        for name in names:
            key.append(name)
            if not _part(kwargs[name], key):
                return None, None
    except RuntimeError:         # no strides (a sparse tensor): binding refuses it with its own error
        return None, None
    return tuple(key), (*args, *[kwargs[name] for name in names])


def _part(a, key: list) -> bool:
    """Append `a`'s part of the key; False when `a` has no layout to key on."""
    tp = type(a)
    if tp is Tensor:
        t = a._t
    elif isinstance(a, torch.Tensor):
        t = a
    elif tp is int or tp is bool:
        key += (tp, a)
        return True
    elif tp is float:           # 0.0 == -0.0 with one hash: the sign keeps their plans apart
        key += (tp, a, math.copysign(1.0, a))
        return True
    else:
        return False
    key += (t.dtype, t.shape, t.stride(), t.device)
    return True


class LaunchPlan:
    """What a launch with this layout already proved, and where each argument comes from."""
    __slots__ = ("slots", "grid", "consts", "scalars", "outputs", "compiled", "err", "args", "config", "seen_at",
                 "repeat", "dynamic_shared", "masks", "pairs", "data_at", "mask_at", "mask_owner")

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
        self.err = None          # numba's ABI (shapes and strides are in the key, so they hold for
        self.args = None         # every launch of the plan; each launch fills in its data pointers)
                                 # and its launch configuration
        self.config = None
        self.dynamic_shared = 0  # bytes of dynamic shared memory per block (scalars are in the key)
        self.masks = {}          # on a GPU: an unsafe kernel's write mask per target (u8, the target's shape)
        self.data_at = {}        # on a GPU: tensor name -> where its data pointer sits in `args`
        self.mask_at = {}        # ... and where each write mask's data pointer sits
        self.mask_owner = {}     # target name -> the data pointer of the memory its mask records
        self.pairs = alias_pairs(kernel, [name for name, _, _, _ in self.slots])   # S7's (output, other) slots

    def rebind(self, kernel, args, kwargs, is_written=None) -> Bound:
        """The bound arguments of this launch, with the per-launch checks done in the full path's
        order: S8 and S13 per argument, then S7, then S14. `is_written(state, view)`: S14's test
        (inside ts.graph(), the capture's own)."""
        from ..runtime.constructors import from_torch
        out = Bound(consts=self.consts, scalars=self.scalars, grid=self.grid)
        held = []
        for name, kind, dtype, (how, at) in self.slots:
            a = kwargs[at] if how == "kw" else args[at]
            if isinstance(a, Tensor):
                a._check_usable(name)
            else:
                a = from_torch(a)
                out.borrowed.append(a)
            held.append(a)
        if share_memory(self.pairs, [a._state for a in held]):      # S7 by bytes where memory is shared
            check_aliasing(kernel, {name: a._byte_set() for (name, _, _, _), a in zip(self.slots, held)})
        for (name, kind, dtype, _), a in zip(self.slots, held):
            t = a._torch()
            if a._state.frozen and kind in WRITTEN:                 # ts.freeze'd since the plan was made
                refuse_frozen_write(kernel.name, name, a._state, t)
            if name in kernel.read_names and not (a._state.is_written(t) if is_written is None
                                                  else is_written(a._state, t)):
                refuse_unwritten(kernel, name)
            out.tensors[name] = ArgFacts(StrongRef(a), tuple(t.shape), t.stride(), dtype, None)
        return out

    def fill_pointers(self, bound) -> None:
        """Write this launch's data pointers into the kernel's parameters (the driver copies them at
        each launch, so one parameter array serves every launch of the plan)."""
        values = self.args.values
        for name, i in self.data_at.items():
            values[i].value = bound.tensors[name].tensor._torch().data_ptr()

    def own_masks(self, targets: dict) -> None:
        """An unsafe kernel's write mask records the writes to one memory (write_masks.py): a launch
        into other memory (`targets`: name -> this launch's data pointer) gets a new mask, so a
        launch in flight keeps its own until its sync marks from it."""
        owner = self.mask_owner
        for name, ptr in targets.items():
            if owner[name] != ptr:
                mask = self.masks[name] = torch.zeros_like(self.masks[name])
                self.args.values[self.mask_at[name]].value = mask.data_ptr()
                owner[name] = ptr

    def passed_outputs(self, args, kwargs) -> tuple:
        return tuple(kwargs[at] if how == "kw" else args[at] for how, at in self.outputs)

