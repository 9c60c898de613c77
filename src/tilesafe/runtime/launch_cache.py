"""The layout cache: a launch whose arguments have the layout of an earlier launch reuses its verdicts.

What a launch checks depends on facts, not on objects. Binding (S5, S6), the Const values,
the grid, the specialization and its bounds masks (S11), the 32/64-bit offset fact and an
output's self-overlap (S7) are functions of each argument's kind, dtype, shape, strides,
tile and device, of the Const values passed and of an explicit grid. Those facts are the
key; after a launch passed every check, a launch with the same key skips those checks —
with new tensor and partition objects as much as with the old ones.

What depends on more than the key is checked on every call. The fast path only ever
accepts: at the first doubt it returns MISS and the launch takes the full path, which
refuses (with its own message and location) or accepts it and remembers the layout.
  * ownership: partitions live and not written by torch since they were lent (S8, S13),
    Ref tensors neither lent nor handed to torch (S8), torch arguments borrowed afresh (S13);
  * runtime scalars: their values (not in the key, so a decode step does not miss per
    token), the preconditions that read them, and the bounds conditions with scalar
    leaves: a value outside the proven range selects the masked code, as the full path
    would. An int's i32/i64 class is in the key;
  * aliasing (S7) between arguments, by address spans: spans that do not meet share no
    byte; where an output's span meets another argument's the full path decides (exactly);
  * initialisation (S14) of every tensor the launch reads.
A plan holds no tensor or partition, so a cached plan keeps no memory alive.
"""
from __future__ import annotations

import weakref

import torch

from ..errors import TileSafeError
from ..lang import bounds
from ..lang.annotations import CONST, OUTPUTS, PTR, REF, SCALAR
from .autotune_config import AUTO
from .binding import ArgFacts, Bound
from .constructors import from_torch
from .execute import execute
from .launch_plan import LaunchPlan
from .layout_unrolled import same_objects, written_out
from .prepared_launch import LayoutLauncher, prepare_layout
from .partition import Partition
from .specialize import LaunchFacts
from .tensor import Tensor
from .value_keys import value_key

MISS = object()          # "take the full path"
OTHER = object()         # (LayoutPlan.direct checking the key's facts) "another layout: look its key up"
_LIMIT = 256             # layouts remembered per kernel; a kernel launched with more starts over
_LAUNCHERS = 16          # sets of runtime scalars a layout keeps GPU launchers for

# Roles of an argument slot (what the fast path does with the value of that position).
_PART, _TENSOR, _TORCH, _GIVEN, _KEYED = range(5)


class LaunchCache:
    """Per kernel: call form -> how to read each position; layout key -> LayoutPlan."""
    __slots__ = ("kernel", "forms", "plans", "inferred", "missed")

    def __init__(self, kernel):
        self.kernel = kernel
        self.forms: dict = {}
        self.plans: dict = {}
        # (ids of the argument values, key) of the launch that just missed: the full path's
        # `remember` in the same locked step takes the key from here instead of building it again.
        self.missed: tuple | None = None
        # Scalars a Ref's shape also fixes: their value is part of the layout.
        self.inferred = {e for p in kernel.params if p.kind == REF for e in p.shape
                         if isinstance(e, str) and kernel.param(e).kind == SCALAR}

    # -- the fast path ------------------------------------------------------------------
    def launch(self, args, kwargs, grid, backend):
        """The launch's future, or MISS (nothing was checked that the full path will not redo)."""
        self.missed = None
        try:
            form = self.forms.get((len(args), tuple(kwargs)))    # a seen call form: one lookup
            if form is None:
                form = self._form(len(args), tuple(kwargs))
            if form is None:
                return MISS
            values = (*args, *kwargs.values()) if kwargs else args   # (args: a tuple, `*args`)
            # The layout of this form's latest direct launch, checked on the objects as they
            # are launched (no key built and hashed: the common loop launches one layout again).
            plan = form.last
            if plan is not None and (plan.parts[0] != backend or bool(plan.parts[1] != grid)):
                plan = None
        except Exception:      # an odd argument: the full path says what is wrong
            return MISS
        future = OTHER if plan is None else plan.direct(values, True)
        if future is OTHER:
            try:
                key = _layout_key(backend, grid, form, values)
                plan = self.plans.get(key)
            except Exception:      # an unhashable or odd argument: the full path says what is wrong
                return MISS
            if plan is None:
                self.missed = (tuple(map(id, values)), key)
                return MISS
            future = plan.direct(values) if plan.launchers else MISS   # a GPU launcher may start it
            if future is not MISS:
                form.last = plan
        if future is not MISS:
            # (torch arguments are borrowed per launch: no repeat-launch plan holds them)
            if not plan.borrows and plan.same(plan, values):
                self._repeat(plan, args, kwargs, grid, backend, values)
            else:      # the same-arguments plan is another launch's now: the next launch need not try it
                self.kernel._last_plan = None
            return future
        done = plan.launch(form, values)
        if done is MISS:
            return MISS
        future, bound, compiled = done
        # The same objects launched again take the prepared path (launch_plan): remember them
        # once they came twice in a row to this layout (new objects each launch, the common
        # case, then build no plan object), unless they cannot come again (torch arguments are
        # borrowed per call; a library call's partitions end with its step).
        if not bound.borrowed and plan.same(plan, values) \
                and not any(type(v) is Partition and v._lent_at is None for v in values):
            self.kernel._last_plan = LaunchPlan(args, kwargs, grid, backend, compiled, bound)
        return future

    def _repeat(self, plan, args, kwargs, grid, backend, values) -> None:
        """The prepared path for objects that came twice in a row through `LayoutPlan.direct`
        (no torch argument there): as `launch` remembers them, with the bound of a check."""
        if any(type(v) is Partition and v._lent_at is None for v in values):
            return
        checked = plan.checked(plan.form, values)
        if checked is not MISS:
            bound, compiled = checked          # checked's order; LaunchPlan takes compiled first
            self.kernel._last_plan = LaunchPlan(args, kwargs, grid, backend, compiled, bound)

    # -- a caller that keeps the verdicts of its launches (a library call's plan) ---------
    def entry(self, kwargs: dict, grid, backend) -> "Entry | None":
        """The layout plan serving a launch with these keyword arguments, to launch the same
        layout again without building its key (Entry.launch), or None."""
        try:
            form = self._form(0, tuple(kwargs))
            if form is None:
                return None
            values = tuple(kwargs.values())
            plan = self.plans.get(_layout_key(backend, grid, form, values))
        except Exception:
            return None
        return None if plan is None else Entry(form, plan, _aligns(values), values)

    def _form(self, npos: int, names: tuple):
        shape = (npos, names)
        form = self.forms.get(shape)
        if form is None and shape not in self.forms:
            form = self.forms[shape] = _Form.of(self.kernel, shape, self.inferred)
        return form

    # -- learning from a launch the full path accepted -----------------------------------
    def remember(self, args, kwargs, grid, backend, bound, compiled, schedule) -> None:
        try:
            form = self._form(len(args), tuple(kwargs))
            if form is None:
                return
            values = (*args, *kwargs.values())
            if any(v is AUTO for v in values):
                return
            missed, self.missed = self.missed, None
            if missed is not None and missed[0] == tuple(map(id, values)) and missed[1][:3] == (backend, grid,
                                                                                                  form.shape):
                key = missed[1]    # the same live objects (the caller holds them) missed a moment ago
            else:
                key = _layout_key(backend, grid, form, values)
            hash(key)
        except Exception:
            return
        if len(self.plans) >= _LIMIT:
            self.forget()
        self.plans[key] = LayoutPlan(self.kernel, form, bound, compiled, backend, schedule, key)
        form.last = None           # its layout may have a new plan now: found by key again

    def forget(self) -> None:
        """Drop every layout plan (the next launch of each layout is checked in full)."""
        self.plans.clear()
        for form in self.forms.values():
            if form is not None:
                form.last = None


class _Form:
    """How the positions of one call form (n positional, these keyword names) map to parameters."""
    __slots__ = ("shape", "names", "roles", "keyed", "last")

    @staticmethod
    def of(kernel, shape, inferred) -> "_Form | None":
        npos, keywords = shape
        params = list(kernel.signature.parameters)
        names = (*params[:npos], *keywords)
        if npos > len(params) or len(set(names)) != len(names):
            return None
        f = _Form()
        f.shape, f.names = shape, names
        f.last = None              # the layout plan of this form's latest direct launch
        f.roles, f.keyed = [], []
        for name in names:
            if name == "schedule" and name not in params:
                role = _KEYED                      # a ts.schedule(...) is part of the layout
            elif name not in params:
                return None                        # the full path names the unknown argument
            else:
                kind = kernel.param(name).kind
                role = _KEYED if kind == CONST or name in inferred else _GIVEN if kind == SCALAR else _TENSOR
            f.roles.append(role)
            f.keyed.append(role == _KEYED)
        return f


def _layout_key(backend, grid, form, values) -> tuple:
    """The layout's key, in one pass over the values (the tensors' facts inline: every
    launch of a seen layout builds one)."""
    parts = [backend, grid, form.shape]
    for keyed, v in zip(form.keyed, values):
        t = type(v)
        if t is Tensor:
            tv = v._t
            # A dtype by its name: hashing the DType itself is a Python call per argument.
            parts.append((t, v._dtype.name, tv.shape, tv.stride(), tv.device, tv.data_ptr() & 15))
        elif t is Partition:
            tv = v._tensor._t
            parts.append((t, v._tile, v._prefix, v._tensor._dtype.name, tv.shape, tv.stride(), tv.device,
                          tv.data_ptr() & 15))
        else:
            parts.append(_key_part(keyed, v))
    return tuple(parts)


def _key_part(keyed, v):
    """The facts of one argument the cached verdicts depend on (tilesafe tensors and
    partitions: `_layout_key` writes theirs inline)."""
    t = type(v)
    if isinstance(v, torch.Tensor):
        return (torch.Tensor, v.dtype, v.shape, v.stride(), v.device, v.layout, v.data_ptr() & 15)
    if keyed:
        return value_key(v)      # Const values, inferred scalars and schedules are part of the layout
    if t is int:
        return (t, -2**31 <= v < 2**31)   # the scalar's dtype (i32 or i64) is in the IR key
    return t


class LayoutPlan:
    """The verdicts of one layout, and what each call must still check."""
    __slots__ = ("kernel", "compiled", "backend", "schedule", "consts", "scalars", "grid", "facts",
                 "given", "outputs", "spans", "apart", "pairs", "reads", "recheck_pre", "scalar_checks", "roles",
                 "names", "launchers", "last", "form", "parts", "borrows", "unrolled", "same")

    def __init__(self, kernel, form, bound, compiled, backend, schedule, key):
        self.kernel, self.compiled, self.backend, self.schedule = kernel, compiled, backend, schedule
        self.parts = key            # the layout key it was remembered under (`direct` checks the facts)
        self.consts = dict(bound.consts)
        self.scalars = {n: v for n, v in bound.scalars.items() if n not in form.names
                        or form.roles[form.names.index(n)] == _KEYED}
        self.grid = bound.grid
        self.form, self.names, self.roles = form, form.names, []
        borrowed = _borrowed(bound)
        for name, role in zip(form.names, form.roles):
            if role == _TENSOR:   # which kind of object fed the tensor parameter (the key's type says the same)
                role = _TORCH if name in borrowed else _PART if isinstance(bound.tensors[name].obj, Partition) \
                    else _TENSOR
            self.roles.append(role)
        self.borrows = _TORCH in self.roles     # torch arguments, borrowed per launch
        # Per tensor: the facts (the same for every call of this layout) and its span's length.
        self.facts = {n: (f.shape, f.strides, f.dtype, f.tile, f.prefix, _extent(f)) for n, f in bound.tensors.items()}
        kinds = {n: kernel.param(n).kind for n in bound.tensors}
        self.outputs = frozenset(n for n, k in kinds.items() if k in (*OUTPUTS, PTR))
        self.spans = tuple((n, f[5]) for n, f in self.facts.items() if f[5] is not None)   # (name, bytes)
        # Spans that met in this accepted launch (two halves of one packed output, say), by
        # their distance: the full path found their bytes disjoint, and so are the bytes of
        # any later pair of this layout at the same distance (the same byte sets, moved).
        self.apart = _apart(bound, self.outputs, self.spans)
        # The pairs `_disjoint` compares: (output, its span, other argument, its span, the
        # distance at which they met in the accepted launch or None).
        self.pairs = tuple((name, ext, other, oext, self.apart.get((name, other)))
                           for name, ext in self.spans if name in self.outputs
                           for other, oext in self.spans if other != name)
        self.launchers: dict = {}   # runtime scalars -> True (seen once), a LayoutLauncher, or False (none)
        self.unrolled = None        # `direct` written out for this layout (layout_unrolled), at its first use
        self.last: list | None = None    # per value of the latest fast launch: a weak reference, or its id
        # `same(self, values)`: whether `values` are the objects of this layout's previous fast
        # launch, remembering them when not (layout_unrolled.same_objects, for these roles: a
        # tensor or partition is held weakly, any other value by id)
        self.same = same_objects(tuple(role == _PART or role == _TENSOR for role in self.roles))
        spec = kernel.specializer.spec(bound)
        self.reads = tuple(n for n, k in kinds.items() if k == REF or k in OUTPUTS and n in spec.reads)
        self.given = tuple(n for n, r in zip(form.names, form.roles) if r == _GIVEN)
        per_call = set(self.given)
        self.recheck_pre = any(_names_in(p.tree) & per_call for p in kernel.preconditions)
        # Bounds conditions with leaves this layout does not fix: evaluated per call.
        facts = LaunchFacts(bound)
        self.scalar_checks = [(c, bounds.masks_for([c], facts)) for c in spec.checks
                              if _scalar_leaves(c) & per_call]

    def direct(self, values, keyed: bool = False):
        """A launch with these argument values through the GPU launcher of their runtime
        scalars, from the objects themselves (no ArgFacts, no Bound: `checked`'s checks,
        inline, in one pass that reads each address once), or MISS with nothing done: no
        launcher for these scalars yet, a torch argument `from_torch` would not borrow in its
        unlocked common case (memory not seen before, handed to torch, a view that is not
        contiguous or reaches past its storage: `checked` borrows it), memory that tracks
        initialisation (its marks need the bound), any doubt. A launcher exists only
        for scalars this layout ran on its own code, so their preconditions and bounds
        conditions hold (as Entry's `scalars_seen`).
        `keyed`: the values were not looked up by key; their facts are compared with this
        plan's key in the same pass (`_layout_key`'s facts, compared as the dictionary would;
        the device as the memory's state knows it, the tensor's own where the state has none),
        and OTHER, with nothing done, says they are another layout's."""
        # Written out once per layout (layout_unrolled.py): the checks of each argument by its
        # role, in argument order, then the launcher of the runtime scalars and S7's spans.
        unrolled = self.unrolled
        if unrolled is None:
            unrolled = self.unrolled = written_out(self, (_PART, _TENSOR, _TORCH, _GIVEN, _KEYED), MISS, OTHER,
                                                   _key_part)
        return unrolled(self, values, keyed)

    def launch(self, form, values):
        """(future, bound, compiled code) of a launch with these argument values, or MISS."""
        checked = self.checked(form, values)
        if checked is MISS:
            return MISS
        bound, compiled = checked
        return self.run(bound, compiled, _scalars(form, values)), bound, compiled

    def run(self, bound, compiled, scalars: tuple):
        """Start a checked launch. One whose runtime scalars (`scalars`) this layout already
        ran twice on its own code starts through a LayoutLauncher on a GPU (Triton's compiled
        kernel, directly: Triton specializes on an int's value, so a launcher serves one set
        of values); a scalar that changes every launch (a decode position) never gets one."""
        self.kernel.last_launch = Launched(bound, compiled)
        if compiled is not self.compiled:
            return execute(compiled, bound)
        launchers = self.launchers
        got = launchers.get(scalars)
        if got is None:
            if len(launchers) >= _LAUNCHERS:
                launchers.clear()
            launchers[scalars] = True          # seen once
        elif got is True:
            got = launchers[scalars] = prepare_layout(compiled, bound) or False
            if type(got) is LayoutLauncher:
                got.launched = Launched(bound, compiled)    # what `direct` launches of it run
        elif got is not False:
            return got(bound)
        return execute(compiled, bound)

    def checked(self, form, values, scalars_seen: bool = False):
        """(bound, compiled code) of a launch with these argument values after the per-call
        checks, or MISS. `scalars_seen`: the runtime scalars are those of a launch this plan
        accepted with its own code (Entry), so their preconditions and bounds conditions hold."""
        tensors, held, borrowed, scalars = {}, {}, [], dict(self.scalars)
        facts = self.facts
        for name, role, v in zip(self.names, self.roles, values):
            if role == _KEYED:
                continue
            if role == _GIVEN:
                scalars[name] = v
                continue
            if role == _PART:
                if type(v) is not Partition or not v._live or v.torch_touched():
                    return MISS
                t = v._tensor
                ref = weakref.ref(v)
            elif role == _TENSOR:
                if type(v) is not Tensor or v._handed_at is not None or \
                        (v._lender is not None and v._lender() is not None):
                    return MISS
                t, ref = v, weakref.ref(v)
            else:
                if not isinstance(v, torch.Tensor):
                    return MISS
                try:
                    t = from_torch(v)          # S13: torch made these bytes (or keeps S14 tracking)
                except TileSafeError:
                    return MISS
                borrowed.append(t)
                ref = weakref.ref(t)
            held[name] = t
            shape, strides, dtype, tile, prefix, _ = facts[name]
            tensors[name] = ArgFacts(ref, shape, strides, dtype, tile, prefix)
        if not self._disjoint(held) or not self._written(held):
            return MISS
        bound = Bound(tensors, dict(self.consts), scalars, self.grid, borrowed)
        compiled = self.compiled
        try:
            if self.recheck_pre and not scalars_seen:
                self.kernel._check_preconditions(bound)
            if self.scalar_checks and not scalars_seen:
                f = LaunchFacts(bound)
                if any(bounds.masks_for([c], f) != want for c, want in self.scalar_checks):
                    compiled = self.kernel.specializer.compiled(bound, self.backend, self.schedule)
        except TileSafeError:
            return MISS
        return bound, compiled

    def _disjoint(self, held) -> bool:
        """S7 between arguments: no output's address span meets another argument's. (An
        output's overlap with itself is a fact of its layout: refused before any plan.)"""
        if not self.pairs:
            return True
        return self._apart_at({name: held[name]._t.data_ptr() for name, _ in self.spans})

    def _apart_at(self, ptrs: dict) -> bool:
        """`_disjoint` with each argument's first address in hand: every (output, other) pair
        of spans either does not meet or meets at the distance of the accepted launch."""
        for name, ext, other, oext, apart in self.pairs:
            lo, olo = ptrs[name], ptrs[other]
            if olo < lo + ext and lo < olo + oext and apart != olo - lo:
                return False
        return True

    def _written(self, held) -> bool:
        """S14: every byte the launch reads was written (None mask: the whole memory was)."""
        for name in self.reads:
            t = held[name]
            state = t._state
            if state.init_mask is not None and not state.is_written(t._t):
                return False
        return True


class Entry:
    """A layout plan and the call form it was found for, kept by a caller whose later
    launches have the same facts but for addresses: each launch checks the one address fact
    in the key (16-byte alignment), then the layout plan's per-call checks."""
    __slots__ = ("form", "plan", "aligns", "scalars")

    def __init__(self, form, plan, aligns, values):
        self.form, self.plan, self.aligns = form, plan, aligns
        # The runtime scalars of the launch the entry was found for, when the plan's own code
        # ran it (then their preconditions and bounds conditions held), else None.
        self.scalars = _scalars(form, values) if _own_code(plan, form, values) else None

    def launch(self, kwargs: dict):
        """The launch's future, or MISS (then the caller takes the full path)."""
        values = tuple(kwargs.values())
        if _aligns(values) != self.aligns:
            return MISS
        scalars = _scalars(self.form, values)
        checked = self.plan.checked(self.form, values, scalars == self.scalars)
        if checked is MISS:
            return MISS
        return self.plan.run(*checked, scalars)


def _scalars(form, values) -> tuple:
    """The runtime scalars among a launch's values, with their types (1 and 1.0 are apart) and
    a zero's sign (value_keys)."""
    return tuple([value_key(v) for role, v in zip(form.roles, values) if role == _GIVEN])


def _own_code(plan, form, values) -> bool:
    """Whether these values' runtime scalars select the plan's own code (their preconditions
    hold and their bounds conditions pick its masks)."""
    try:
        checked = plan.checked(form, values)
    except Exception:
        return False
    return checked is not MISS and checked[1] is plan.compiled


def _aligns(values) -> tuple:
    return tuple(v._tensor._t.data_ptr() & 15 if type(v) is Partition else v._t.data_ptr() & 15
                 if type(v) is Tensor else None for v in values)


class Launched:
    """The latest launch of a kernel: its Const values, scalars and grid, and the code it ran
    (bench/observe). Holds no tensor: the last launch must not keep memory alive."""
    __slots__ = ("consts", "scalars", "grid", "compiled")

    def __init__(self, bound, compiled):
        self.consts, self.scalars, self.grid, self.compiled = bound.consts, bound.scalars, bound.grid, compiled

    @property
    def bound(self) -> Bound:
        return Bound(consts=self.consts, scalars=self.scalars, grid=self.grid)


def _apart(bound, outputs, spans) -> dict:
    """(output, other) -> the other's first byte minus the output's, for the spans that meet
    in the accepted launch `bound` (on one device)."""
    held = {n: bound.tensors[n].tensor._t for n, _ in spans}
    at = {n: (t.device, t.data_ptr(), t.data_ptr() + ext) for (n, ext), t in zip(spans, held.values())}
    found = {}
    for name in outputs:
        if name not in at:
            continue
        dev, lo, hi = at[name]
        for other, (odev, olo, ohi) in at.items():
            if other != name and odev == dev and olo < hi and lo < ohi:
                found[(name, other)] = olo - lo
    return found


def _borrowed(bound) -> set:
    ids = {id(t) for t in bound.borrowed}
    return {n for n, f in bound.tensors.items() if id(f.tensor) in ids}


def _extent(f) -> int | None:
    """Bytes from a view's first element to one past its last; None when it has none."""
    if any(n == 0 for n in f.shape):
        return None
    item = f.dtype.itemsize
    return item + item * sum((n - 1) * s for n, s in zip(f.shape, f.strides))


def _names_in(tree) -> set:
    import ast
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _scalar_leaves(check) -> set:
    found = set()

    def visit(expr):
        if isinstance(expr, tuple) and expr:
            if expr[0] == "scalar":
                found.add(expr[1])
            else:
                for e in expr[1:]:
                    visit(e)
    for a in check.axes:
        visit(a.condition)
        visit(a.fits)
    return found

