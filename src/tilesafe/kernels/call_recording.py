"""What a library call did, recorded on its full path so that a call of the same layout can redo it.

A library function decides everything from its arguments' layouts: which tensors it
allocates, which views of its tensors each kernel gets, with which tiles, config and
scalars, which whole-call alias check it makes. While a call runs its full path, the
helpers that do those things report them here (`arguments.output` / `arguments.empty_scratch`,
`call_checks.check_aliasing`, `launch.launch`); the record becomes a plan (call_plans.py).

Every tensor is recorded relative to a *root*: one of the call's tensor arguments (in the
order the plan key lists them), a tensor the call allocated, or the device's scratch
buffer. A view is (root, byte offset from the root's first element, shape, strides), found
by its storage: the plan key fixes which arguments share a storage and at what distance,
so a view rebuilt from the same root of a later call is the view the full path would make.
Anything the record cannot place (a tensor from a constructor it does not know, a value it
cannot keep) spoils it: that layout then always takes the full path, which is never wrong.
"""
from __future__ import annotations

import contextvars

import torch

from ..runtime.aliasing import first_address
from ..runtime.tensor import Tensor
from . import scratch

ACTIVE: contextvars.ContextVar = contextvars.ContextVar("tilesafe_call_recording", default=None)

# Kinds of roots.
ARG, EMPTY, SCRATCH = range(3)
# Kinds of steps.
CHECK, LAUNCH = range(2)


class View:
    """A tensor of a plan: `root`'s storage at `offset` elements from the root's first, with
    this shape and these strides (in elements); shape None: the root itself."""
    __slots__ = ("root", "offset", "shape", "strides")

    def __init__(self, root: int, offset: int, shape: tuple, strides: tuple):
        self.root, self.offset, self.shape, self.strides = root, offset, shape, strides


class Recording:
    """The roots and steps of one call on its full path; `spoiled` when something could not
    be recorded."""
    __slots__ = ("roots", "places", "steps", "spoiled", "returned", "scratch_elems")

    def __init__(self, tensors: list):
        # Per root: (kind, recipe); places: per root, its storage (device, address) and first element's address.
        self.roots: list = []
        self.places: list = []
        self.steps: list = []
        self.returned: list = []           # per root: the object a call hands back for it (or None)
        self.spoiled = False
        self.scratch_elems = 0
        for t in tensors:
            tv = t._t if type(t) is Tensor else t
            self._add(ARG, None, tv, t)

    def _add(self, kind, recipe, tv: torch.Tensor, returned) -> int:
        self.roots.append((kind, recipe))
        sptr = tv.untyped_storage().data_ptr()
        self.places.append((tv.device, sptr, first_address(tv, sptr), tv.dtype, tv.shape, tv.stride()))
        self.returned.append(returned)
        return len(self.roots) - 1

    # -- reports from the helpers ---------------------------------------------------------------
    def allocated(self, tensor: Tensor, returned, recipe: tuple) -> None:
        """The call allocated `tensor` (`recipe`: shape, dtype, device, torch_mode) and returns `returned` for it."""
        self._add(EMPTY, recipe, tensor._t, returned)

    def checked(self, fn: str, inputs: dict, outputs: dict, in_place) -> None:
        self.steps.append((CHECK, fn, self._names(inputs), self._names(outputs), in_place))

    def launched(self, kernel, outputs: dict, grid, cfg, pdl: bool, args: dict) -> None:
        outs = {name: (self.view(v), tuple(tile)) for name, (v, tile) in outputs.items()}
        values = {}
        for name, v in args.items():
            if type(v) is Tensor:
                values[name] = self.view(v)
            elif isinstance(v, torch.Tensor):
                self.spoiled = True
            else:
                values[name] = v
        self.steps.append((LAUNCH, kernel, outs, grid, cfg, pdl, values))

    def _names(self, named: dict) -> dict:
        return {n: (None if t is None else self.view(t)) for n, t in named.items()}

    # -- placing a tensor -------------------------------------------------------------------------
    def view(self, t) -> View | None:
        """`t` as a View of a root; spoils the record when it is none."""
        tv = t._t if type(t) is Tensor else t
        if not isinstance(tv, torch.Tensor):
            self.spoiled = True
            return None
        device, storage = tv.device, tv.untyped_storage().data_ptr()
        ptr = first_address(tv, storage)
        shared = False
        for i, (rdev, rstorage, rptr, rdtype, rshape, rstrides) in enumerate(self.places):
            if rstorage == storage and rdev == device:
                shared = True
                if rdtype != tv.dtype or (ptr - rptr) % tv.element_size():
                    continue       # another root over these bytes may have the view's dtype
                if ptr == rptr and rshape == tv.shape and rstrides == tv.stride():
                    return View(i, 0, None, None)
                offset = (ptr - rptr) // tv.element_size()
                if self.roots[i][0] == SCRATCH:
                    self._grow_scratch(offset, tv)
                return View(i, offset, tuple(tv.shape), tuple(tv.stride()))
        if not shared and self._scratch_root(tv, device, storage) is not None:
            return self.view(t)
        self.spoiled = True
        return None

    def _scratch_root(self, tv, device, storage) -> int | None:
        """The root for a scratch buffer (scratch.py) when `tv` lies in it (one per record)."""
        for key, buf in scratch.buffers().items():
            bt = buf._t
            if bt.untyped_storage().data_ptr() == storage and bt.device == device:
                if any(kind == SCRATCH for kind, _ in self.roots):
                    return None        # a buffer grown between two uses: not worth a plan
                return self._add(SCRATCH, key, bt, None)
        return None

    def _grow_scratch(self, offset: int, tv: torch.Tensor) -> None:
        if tv.numel() == 0 or offset < 0:
            self.spoiled = self.spoiled or offset < 0
            return
        end = offset + 1 + sum((n - 1) * s for n, s in zip(tv.shape, tv.stride()))
        self.scratch_elems = max(self.scratch_elems, end)

    def result(self, value):
        """The call's return value as root indices (a tuple of them for a tuple)."""
        if isinstance(value, tuple):
            return tuple(self.result(v) for v in value)
        for i, r in enumerate(self.returned):
            if r is value and value is not None:
                return i
        self.spoiled = True
        return None


def active() -> Recording | None:
    """The recording of the library call running on this thread's full path, if any."""
    return ACTIVE.get()
