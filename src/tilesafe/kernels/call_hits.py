"""A call plan's hit from torch memory: the library call at the cost of its launches.

A plan (call_plans.py) redoes a recorded call with new tensors; done with tilesafe objects
(`from_torch` per argument, views, partitions, the launch cache's per-call checks) that costs
hundreds of Python calls per launch. What those objects check on a hit depends on the call's
layout, which the plan key fixes, and on a few facts of each storage, which are checked here
once per call:
  * S13: a torch argument is borrowed as `from_torch` borrows it — its memory's storage state
    (made by `from_torch` when there is none, or when it tracks initialisation: then S13's
    "torch wrote these bytes" mark applies) and its extent inside its storage;
  * S7: arguments the key places in different storages are in different memory (distinct
    storage states). Arguments in one storage sit at the distances of the recorded call (the
    key), so every view of the call meets every other exactly as in the recorded call, whose
    whole-call checks (call_checks.check_aliasing) and launches accepted them: those verdicts
    hold again, and the whole-call checks are not redone;
then each launch checks lending, initialisation and alignment and starts
(runtime/planned_launch.py). A launch that cannot start that way — and every launch of a call
whose roots failed the S7 condition — takes the plan's full step (call_plans.CallPlan's), which
checks everything and refuses as a fresh call would.
"""
from __future__ import annotations

import weakref

import torch

from ..runtime.aliasing import first_address
from ..runtime.constructors import empty, from_torch
from ..runtime.host_lock import LOCK
from ..runtime.planned_launch import PlannedLaunch
from ..runtime.storage_state import STATE_ATTR, StorageState
from ..runtime.tensor import Tensor
from ..runtime.value_keys import value_key
from . import call_recording as R
from . import scratch
from .call_checks import check_aliasing
from .call_hits_unrolled import unrolled as written_out
from .launch import start


class CallHit:
    """The fast form of one CallPlan (see the module's docstring)."""
    __slots__ = ("plan", "launches", "groups", "extents", "internal", "news", "flat", "kept", "seen", "unrolled")

    def __init__(self, plan, launches: list, groups: int, extents: list):
        self.plan, self.launches, self.groups, self.extents = plan, launches, groups, extents
        # Allocated roots the call does not return: workspaces of its own launches.
        self.internal = frozenset(i for i, (kind, _) in enumerate(plan.roots)
                                  if kind == R.EMPTY and i not in _returned(plan.returned))
        returned = plan.returned
        self.flat = type(returned) is tuple and all(type(r) is int for r in returned)
        # Roots allocated as torch's new bytes (see __call__): torch.empty's arguments, made once.
        self.news = {i: (recipe[0], recipe[1].torch, torch.device(recipe[2]))
                     for i, (kind, recipe) in enumerate(plan.roots)
                     if kind == R.EMPTY and (recipe[3] or i in self.internal)}
        # The workspaces (internal roots), allocated by the first call and kept: every call's
        # launches use them as a caller's `workspace=` would be used (see __call__).
        self.kept: dict = {}
        # Per scratch root, (a weak reference to the thread's scratch buffer it was made in, the
        # root): the written-out form's (scratch_root), taken while that buffer is the current one.
        self.seen: dict = {}
        self.unrolled = None        # the common case written out (call_hits_unrolled), set by `of`

    @staticmethod
    def of(plan, places: list) -> "CallHit | None":
        """The fast form of `plan`, made after a call of it with the tensors of `places`
        (call_key's; its steps then hold the launch cache's entries); None when no launch of
        it can start fast."""
        if any(type(t) is not Tensor and t.requires_grad for *_, t in places):
            return None        # the key fixes it for every call: each borrow is from_torch's (S13)
        launches = [_planned(step) if type(step) is not tuple else None for step in plan.steps]
        if not any(launches):
            return None
        allocated = len(plan.roots) - len(places)
        groups = len({sptr for _, _, sptr, _, _ in places}) + allocated   # the key's storages
        extents = [_extent(tv) for tv, *_ in places]
        hit = CallHit(plan, launches, groups, extents)
        hit.unrolled = written_out(hit, places)
        return hit

    def __call__(self, places: list):
        """The call with the tensors of `places` (call_plans.call_key's)."""
        unrolled = self.unrolled
        if unrolled is not None:
            return unrolled(self, places)
        return self._walk(places)

    def _walk(self, places: list):
        """`__call__` by loops over the plan's roots and steps: every case."""
        plan = self.plan
        with LOCK:
            # Per root: (torch view, storage state, first element's address, storage's address and bytes).
            roots, handed = [], [place[4] for place in places]
            made = [None] * len(plan.roots)     # tilesafe tensors of the roots, where a step needs one
            i = 0
            for (tv, storage, sptr, ptr, t), extent in zip(places, self.extents):
                if type(t) is Tensor:
                    if t._handed_at is not None or (t._lender is not None and t._lender() is not None):
                        # Handed over or lent since call_key read it (another thread): refused as
                        # the library function's first read of it refuses it on the full path.
                        t._check_usable("dtype")
                    roots.append((tv, t._state, ptr, sptr, storage.nbytes()))
                    made[i] = t
                else:
                    state = getattr(storage, STATE_ATTR, None)
                    nbytes = storage.nbytes()
                    if state is None or state.init_mask is not None or ptr - sptr + extent > nbytes:
                        m = made[i] = from_torch(t)   # S13 as a fresh call borrows it (and refuses what it refuses)
                        roots.append((m._t, m._state, ptr, sptr, nbytes))
                    else:
                        roots.append((tv, state, ptr, sptr, nbytes))
                i += 1
            for i, (kind, recipe) in enumerate(plan.roots[len(places):], len(places)):
                if kind == R.EMPTY:
                    shape, dtype, device, torch_mode = recipe
                    if i in self.news:
                        # Torch's new bytes: all written (from_torch's state without its checks).
                        # A workspace only this call's launches see counts as written too: what
                        # they read of it, the recorded call's launches had written (S14 by layout).
                        # It is kept for the next call, as a caller's `workspace=`: nothing else
                        # sees it, and its registry orders the next call's launches after this
                        # one's on another stream (S10), as for any tensor a call is passed.
                        root = self.kept.get(i)
                        if root is not None:
                            roots.append(root)
                            handed.append(None)
                            continue
                        new = self.news[i]
                        try:
                            t = torch.empty(new[0], dtype=new[1], device=new[2])
                        except RuntimeError:
                            t = empty(shape, dtype, device)._t    # refuses with ts.empty's error (too large)
                        storage = t.untyped_storage()
                        nbytes, ptr = storage.nbytes(), t.data_ptr()
                        state = StorageState.attach_new(storage, nbytes, ptr)
                        root = (t, state, ptr, ptr, nbytes)
                        roots.append(root)
                        if i in self.internal:
                            self.kept[i] = root
                        handed.append(t if torch_mode else None)
                        continue
                    t = empty(shape, dtype, device)
                else:
                    t = scratch.views(recipe, (plan.scratch_elems,))[0]
                tv = t._t
                storage = tv.untyped_storage()
                sptr = storage.data_ptr()
                roots.append((tv, t._state, first_address(tv, sptr), sptr, storage.nbytes()))
                made[i] = t
                handed.append(t if kind == R.EMPTY else None)
            # Merged states share one __dict__ (storage_state._absorb): that is the memory's identity.
            self._steps(roots, made, len({id(root[1].__dict__) for root in roots}) == self.groups)
            returned = plan.returned
            if type(returned) is int:
                return handed[returned]
            if self.flat:                      # a tuple of results (rms_norm's with its residual)
                return tuple([handed[r] for r in returned])
            return _result(returned, handed)

    def scratch_root(self, i: int) -> tuple:
        """(weak reference to the buffer, root) of scratch root `i` in this thread's scratch for
        its device, as `_walk` makes the root (scratch.views: a buffer too small is replaced by
        a larger one), kept in `seen` for the next calls while that buffer is this thread's (and
        forgotten when the buffer dies, so that a replaced buffer's memory is not kept by a plan)."""
        plan = self.plan
        device = plan.roots[i][1]
        t = scratch.views(device, (plan.scratch_elems,))[0]
        tv = t._t
        storage = tv.untyped_storage()
        sptr = storage.data_ptr()
        seen = self.seen

        def forget(ref):        # the buffer was replaced or its thread ended: let go of its memory now
            if seen.get(i, _NO_ROOT)[0] is ref:
                seen.pop(i, None)      # (another thread may have taken it since: made again then)
        found = seen[i] = (weakref.ref(scratch.buffers()[device], forget),
                           (tv, t._state, first_address(tv, sptr), sptr, storage.nbytes()))
        return found

    def _steps(self, roots: list, made: list, apart: bool) -> None:
        """The plan's steps on these roots (`made`: their tilesafe tensors where made);
        `apart`: the roots the key places in different storages are in different memory (S7)."""
        k = 0
        for step, launch in zip(self.plan.steps, self.launches):
            if type(step) is tuple:
                if not apart:
                    _, fn, inputs, outputs, in_place = step
                    check_aliasing(fn, _named(inputs, roots, made), _named(outputs, roots, made), in_place)
            elif not (apart and launch is not None and launch.run(roots)):
                self._full_step(k, roots, made)
            k += 1

    def _full_step(self, k: int, roots: list, made: list) -> None:
        """Step `k` (a launch) by the full launch path: it checks everything and refuses as a
        fresh call would."""
        step = self.plan.steps[k]
        outputs = {n: (_tensor(v, roots, made), tile) for n, (v, tile) in step.outs.items()}
        args = {n: _tensor(v, roots, made) if type(v) is R.View else v for n, v in step.values.items()}
        start(step.kernel, outputs, step.grid, args, step)


_NO_ROOT = (None,)


def _planned(step) -> PlannedLaunch | None:
    """The fast launch of one step, when its launch cache entry was found for the very runtime
    scalars the step passes (so their preconditions and bounds conditions hold)."""
    entry = step.entry
    if entry is None or entry.scalars is None:
        return None
    plan = entry.plan
    views = {n: v for n, (v, _) in step.outs.items()}
    views.update((n, v) for n, v in step.values.items() if type(v) is R.View)
    given = {n: v for n, v in step.values.items() if type(v) is not R.View and n in plan.given}
    if tuple(value_key(given[n]) for n in plan.given if n in given) != entry.scalars or \
            len(given) != len(plan.given):
        return None
    access = []
    for name, f in plan.facts.items():
        v = views.get(name)
        if v is None:
            return None
        if v.shape is not None and (tuple(v.shape) != tuple(f[0]) or tuple(v.strides) != tuple(f[1])):
            return None
        access.append((name, v.root, None if v.shape is None else v.offset))
    if len(access) != len(views):
        return None
    return PlannedLaunch(step.kernel, entry, access, given)


def _returned(returned) -> set:
    """The root indices a call hands back."""
    if isinstance(returned, tuple):
        return set().union(*map(_returned, returned))
    return {returned}


def _extent(t: torch.Tensor) -> int:
    """Bytes from a view's first element to one past its last (0 when it has none)."""
    if t.numel() == 0:
        return 0
    item = t.element_size()
    return item + item * sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _made(i: int, roots: list, made: list) -> Tensor:
    """Root `i` as a tilesafe tensor (made on the first full step that needs it)."""
    t = made[i]
    if t is None:
        t = made[i] = from_torch(roots[i][0])
    return t


def _tensor(v: R.View, roots: list, made: list) -> Tensor:
    root = _made(v.root, roots, made)
    if v.shape is None:
        return root
    base = root._t
    return Tensor(base.as_strided(v.shape, v.strides, base.storage_offset() + v.offset), root._state)


def _named(named: dict, roots: list, made: list) -> dict:
    return {n: (None if v is None else _tensor(v, roots, made)) for n, v in named.items()}


def _result(returned, handed: list):
    if isinstance(returned, tuple):
        return tuple(_result(r, handed) for r in returned)
    return handed[returned]


