"""Plans of library calls, cached by the layout of the caller's arguments.

`@planned` gives a library function its plans: the first call of a layout runs the
function (its full path) while call_recording.py records what it did; the next call of
that layout redoes the record — borrows, allocations, the whole-call alias checks and the
launches, with new views of the new tensors — without the function's Python.

A library call decides a lot from its arguments' layouts alone: dtypes and devices agree,
the result's shape, which kernel runs (in place or not), how the tensors are viewed at
the kernel's rank, the tile and the config. Those decisions are the same for every call
whose arguments have the same layout, so a call keeps them in a plan keyed by that layout
and the next such call — with new torch tensors, as a user has them — reads them back.

What a layout does not decide is done on every call: borrowing torch tensors (S13),
allocating the result, the whole-call alias check of a caller's `out=` (call_checks), and
the launch, whose own checks the runtime caches by layout too (runtime/launch_cache.py).
A call that is unusual in any way (a lent or handed-over tensor, an argument that is not a
tensor, a `config=` override) takes the full path, which refuses it with its own message
or makes the plan.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from ..backends.triton import targets
from ..dtypes import DType
from ..runtime.constructors import empty, from_torch
from ..runtime.tensor import Tensor
from ..runtime.value_keys import value_key
from ..settings import backend_var, graph_var, launching_disabled_var, pdl_var
from . import call_recording as R
from . import configs, scratch
from .call_checks import check_aliasing
from .call_hits import CallHit
from .launch import schedule_with, start

_LIMIT = 256        # plans per library function family; more distinct layouts start over


def layout_of(x):
    """The facts of one argument a plan depends on; None when the call must take the full path."""
    if type(x) is Tensor:
        if x._handed_at is not None or (x._lender is not None and x._lender() is not None):
            return None                    # the full path raises the ownership error
        t = x._t
        return (Tensor, x._dtype.name, t.shape, t.stride(), t.get_device())   # a DType's hash is a Python call
    if isinstance(x, torch.Tensor):
        if x.layout is not torch.strided:
            return None
        return (torch.Tensor, x.dtype, x.shape, x.stride(), x.get_device(), x.requires_grad)
    return None


class PlanCache:
    """Plans by key, forgotten all at once when too many layouts were seen."""
    __slots__ = ("plans",)

    def __init__(self):
        self.plans: dict = {}

    def get(self, key):
        return self.plans.get(key) if key is not None else None

    def put(self, key, plan) -> None:
        if key is None:
            return
        if len(self.plans) >= _LIMIT:
            self.plans.clear()
        self.plans[key] = plan


# --- planned library functions ----------------------------------------------------------------

_NONE = ("none",)
_VALUES = (bool, int, float, str)


def planned(fn):
    """Give the library function `fn` a plan per argument layout (see the module's docstring).
    The wrapper's `plans` is its PlanCache."""
    plans = PlanCache()
    table = plans.plans      # read directly on every call (PlanCache.put may clear it, never replace it)
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        outer = R.ACTIVE.get()
        if outer is not None:
            if not outer.spoiled:
                # A library call made by another's full path as part of its work (a fused call's
                # unfused form above 16 rows, say): its allocations, checks and launches are
                # steps of the outer call's record, and so of its plan.
                return fn(*args, **kwargs)
            # A first-use tuning run (configs.lookup's `run`: it spoils the record before the timed
            # runs), not part of the call's work: no step of the record, which is no plan anyway.
            token = R.ACTIVE.set(None)
            try:
                return fn(*args, **kwargs)
            finally:
                R.ACTIVE.reset(token)
        if graph_var.get() is not None or launching_disabled_var.get() or pdl_var.get() is not None:
            return fn(*args, **kwargs)     # a capture (S12 checks every launch), `tilesafe check`, a PDL override
        found = call_key(name, args, kwargs)
        key = found[0]
        if key is None:
            return fn(*args, **kwargs)
        places = found[1]
        plan = table.get(key)
        if plan is not None:
            hit = plan.hit
            return hit(places) if hit else plan.call(places)
        rec = R.Recording([place[4] for place in places])
        token = R.ACTIVE.set(rec)
        try:
            result = fn(*args, **kwargs)
        finally:
            R.ACTIVE.reset(token)
        returned = rec.result(result)
        if not rec.spoiled:
            plans.put(key, CallPlan(rec, returned))
        return result
    call.plans = plans
    return call


def call_key(name: str, args: tuple, kwargs: dict):
    """(key, the places of the call's tensors in key order); key None when the call must take
    the full path. A tensor's place: (its torch view, its storage, the storage's address, its
    first element's address, the tensor as passed), read once per call for the key and the
    plan's fast form (call_hits). An empty view's first element has an address too (its
    storage's plus its offset; torch's `data_ptr()` is 0 there): distances between tensors
    of one storage, and the byte sets of a fast launch, are exact for it."""
    parts = [name, len(args), tuple(kwargs)]
    # Per tensor, its place, and which tensors share a storage with an earlier one, at what
    # distance: the views a call makes of one are then views of the other too (call_recording).
    # Read in the same pass as the key: both are read on every call.
    places: list = []
    shared: list = []                      # (tensor, earlier tensor, distance) where they share one
    first: dict = {}                       # storage address -> the first tensor in it (a dict: a
    #                                        decode_attention call with its workspace passes 9)
    for v in (*args, *kwargs.values()):
        if type(v) is torch.Tensor:        # the common case: layout_of's, inline
            if v.layout is not _STRIDED:
                return None, None
            parts.append((torch.Tensor, v.dtype, v.shape, v.stride(), v.get_device(), v.requires_grad))
            tv = v
        elif v is None:
            parts.append(_NONE)
            continue
        elif (kind := type(v)) is int or kind is str or kind is bool or kind is float and v:
            parts.append((kind, v))        # value_key's, inline (a float zero keeps its sign below)
            continue
        elif kind in _VALUES:
            parts.append(value_key(v))     # -0.0 apart from 0.0: the plan replays the recorded value
            continue
        elif kind is tuple:                # names, shapes: hashable or a call for the full path
            try:
                hash(v)
            except TypeError:
                return None, None
            parts.append((tuple, v))
            continue
        elif type(v) is DType:             # a dtype argument, by name (a DType's hash is a Python call)
            parts.append((DType, v.name))
            continue
        elif type(v) is Tensor or isinstance(v, torch.Tensor):
            lay = layout_of(v)
            if lay is None:
                return None, None
            parts.append(lay)
            tv = v._t if type(v) is Tensor else v
        elif (fields := _workspace(v)) is not None:                       # a workspace of tensors
            # layout_of and the place of each field, inline (a decode step passes one per layer)
            lays = []
            for f in fields:
                if f._handed_at is not None or (f._lender is not None and f._lender() is not None):
                    return None, None      # the full path raises the ownership error
                tv = f._t
                lays.append((Tensor, f._dtype.name, tv.shape, tv.stride(), tv.get_device()))
                storage = tv.untyped_storage()
                sptr = storage.data_ptr()
                ptr = tv.data_ptr() or sptr + tv.storage_offset() * tv.element_size()   # first_address
                j = first.get(sptr)
                if j is None:
                    first[sptr] = len(places)
                else:
                    shared.append((len(places), j, ptr - places[j][3]))
                places.append((tv, storage, sptr, ptr, f))
            parts.append((type(v), tuple(lays)))
            continue
        else:
            try:
                hash(v)
            except TypeError:
                return None, None          # a config dict: its call takes the full path
            parts.append((type(v), v))     # an activation name, a torch dtype
            continue
        storage = tv.untyped_storage()     # the tensor's place
        sptr = storage.data_ptr()
        ptr = tv.data_ptr() or sptr + tv.storage_offset() * tv.element_size()   # first_address, inline
        j = first.get(sptr)
        if j is None:
            first[sptr] = len(places)
        else:
            shared.append((len(places), j, ptr - places[j][3]))
        places.append((tv, storage, sptr, ptr, v))
    parts.append(tuple(shared))
    # The decisions also depend on the backend and target (configs, workers), on autograd
    # (refusals) and on torch's fp32 matmul precision (tf32 by default or not).
    # (current_backend's override read inline: one Python call fewer per library call)
    parts += (backend_var.get() or configs.current_backend(), targets.compile_target_var.get(),
              torch.is_grad_enabled(), _matmul_precision())
    return tuple(parts), places


_STRIDED = torch.strided


# torch.get_float32_matmul_precision without its Python wrapper (one call fewer per library call).
_matmul_precision = getattr(torch._C, "_get_float32_matmul_precision", torch.get_float32_matmul_precision)


def _workspace(v) -> list | None:
    """The tensors of a workspace argument (a dataclass of tilesafe tensors), else None (a
    dtype is a dataclass too: it is a value)."""
    kind = type(v)
    names = _FIELDS.get(kind, _UNSEEN)
    if names is _UNSEEN:        # per type, once: its field names (None: not a dataclass instance)
        names = _FIELDS[kind] = (tuple(f.name for f in dataclasses.fields(v))
                                 if dataclasses.is_dataclass(v) and not isinstance(v, type) else None)
    if not names:
        return None
    fields = [getattr(v, name) for name in names]
    for f in fields:
        if type(f) is not Tensor:
            return None
    return fields


_FIELDS: dict = {}      # type -> its dataclass field names, or None
_UNSEEN = object()


class CallPlan:
    """A recorded call: its roots, steps and result, redone for the tensors of a new call."""
    __slots__ = ("roots", "steps", "returned", "scratch_elems", "hit")

    def __init__(self, rec: R.Recording, returned):
        self.roots, self.returned = rec.roots, returned
        self.steps = [_Launch(*step[1:]) if step[0] == R.LAUNCH else step for step in rec.steps]
        self.scratch_elems = rec.scratch_elems
        self.hit = None             # the fast form (call_hits.py), made after the first redo; False: none

    def call(self, places: list):
        """The call with the tensors of these places (call_key's)."""
        hit = self.hit
        if hit:
            return hit(places)
        result = self.redo([place[4] for place in places])
        if hit is None:             # the steps now hold their launch cache entries
            self.hit = CallHit.of(self, places) or False
        return result

    def redo(self, tensors: list):
        roots, handed = [], []
        for t in tensors:                  # S13: torch tensors are borrowed afresh by every call
            if type(t) is Tensor and layout_of(t) is None:
                t._check_usable("dtype")   # handed over or lent since call_key (another thread): CallHit's rule
            roots.append(t if type(t) is Tensor else from_torch(t))
            handed.append(t)
        for kind, recipe in self.roots[len(tensors):]:
            if kind == R.EMPTY:
                shape, dtype, device, torch_mode = recipe
                if torch_mode:
                    t = torch.empty(shape, dtype=dtype.torch, device=device)
                    roots.append(from_torch(t))
                    handed.append(t)
                else:
                    t = empty(shape, dtype, device)
                    roots.append(t)
                    handed.append(t)
            else:
                roots.append(scratch.views(recipe, (self.scratch_elems,))[0])
                handed.append(None)
        for step in self.steps:
            if type(step) is _Launch:
                outputs = {n: (_tensor(v, roots), tile) for n, (v, tile) in step.outs.items()}
                args = {n: _tensor(v, roots) if type(v) is R.View else v for n, v in step.values.items()}
                start(step.kernel, outputs, step.grid, args, step)
            else:
                _, fn, inputs, outputs, in_place = step
                check_aliasing(fn, _named(inputs, roots), _named(outputs, roots), in_place)
        return _result(self.returned, handed)


class _Launch:
    """One launch of a plan: the kernel, its outputs' views and tiles, its other arguments
    (the schedule made once), and the launch cache's entry for the layout (launch.start)."""
    __slots__ = ("kernel", "outs", "grid", "values", "entry")

    def __init__(self, kernel, outs, grid, cfg, pdl, values):
        self.kernel, self.outs, self.grid, self.entry = kernel, outs, grid, None
        self.values = dict(values, schedule=schedule_with(cfg, pdl)) if cfg is not None or pdl else values


def _named(named: dict, roots: list) -> dict:
    return {n: (None if v is None else _tensor(v, roots)) for n, v in named.items()}


def _tensor(v: R.View, roots: list) -> Tensor:
    root = roots[v.root]
    if v.shape is None:
        return root
    base = root._t
    return Tensor(base.as_strided(v.shape, v.strides, base.storage_offset() + v.offset), root._state)


def _result(returned, handed: list):
    if isinstance(returned, tuple):
        return tuple(_result(r, handed) for r in returned)
    return handed[returned]
