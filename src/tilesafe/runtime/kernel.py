"""`@ts.kernel`: a checked kernel object that specializes, compiles and launches.

The launch pipeline, in order (each step can refuse, and a refused launch changes nothing):
  1. bind arguments to parameters (kinds, dtypes, ranks, named dims; S6) and infer the grid (S5);
  2. check preconditions;
  3. check aliasing (S7) and initialisation (S14) on the real memory;
  4. specialize: build the IR for these compile-time facts (cached), place bounds masks
     from the launch facts (S11), compile for the backend (cached);
  5. run, then record what the launch wrote (S14) and what it still uses (S9/S10).
A launch whose arguments have the layout of an earlier accepted launch skips the checks
that layout decides (launch_cache: a dictionary lookup, then the per-call checks of
ownership, scalars, aliasing spans and initialisation); the same argument objects as the
last launch take the prepared path (launch_plan).
Inside `ts.graph()` a launch is first admitted by the capture (S12: the backend and stream
it can replay), and its S14 marks wait for the replay. A launch holds the runtime's lock
from binding to recording (host_lock), so threads launching at once see each other's steps
whole.
"""
from __future__ import annotations

import contextvars
import inspect

from ..errors import KernelError, LaunchError, TileSafeError, at_callers_line
from ..lang.annotations import OUTPUTS
from ..lang.definition_checks import check_definition
from ..lang.signature import parse_params
from ..lang.source import KernelSource
from ..settings import current_backend, graph_var, launching_disabled_var, pdl_launches, pdl_var
from . import binding, safety
from .autotune_config import AUTO
from .execute import execute
from .freeze import early_reads, reads_early
from .host_lock import LOCK
from .launch_cache import MISS, LaunchCache, Launched
from .launch_plan import LaunchPlan
from .preconditions import Precondition, written_at
from .schedule import take as take_schedule, with_pdl
from .specialize import Specializer


# Set by `tilesafe check --target` (check_target.py): called with (kernel, args, kwargs, grid)
# for each launch the checked file makes, which is then refused as every launch there is.
refused_launch_var: contextvars.ContextVar = contextvars.ContextVar("tilesafe_refused_launch", default=None)


class Kernel:
    def __init__(self, fn, unsafe=False, preconditions=(), deny_kernel_checks=False, sanitize=None, schedule=None):
        self.fn = fn
        self.schedule = schedule
        self.name = fn.__name__
        self.unsafe = unsafe
        self.deny_kernel_checks = deny_kernel_checks
        self.sanitize = sanitize
        self.src = KernelSource.of(fn)
        self.params = parse_params(fn, self.src, unsafe)
        self.signature = inspect.signature(fn)
        self._by_name = {p.name: p for p in self.params}
        self._outputs = tuple(p.name for p in self.params if p.kind in OUTPUTS)   # asked by every launch
        check_definition(self.src, self.params, unsafe)
        names = set(self._by_name)
        self.preconditions = [Precondition.parse(t, names, written_at(self.src, t)) for t in (preconditions or ())]
        self.specializer = Specializer(self)
        self._last_plan: LaunchPlan | None = None
        self._layouts = LaunchCache(self)
        self.last_launch: Launched | None = None   # what the latest launch bound and ran (bench/observe)
        self.specializer.try_at_definition()
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def param(self, name: str):
        return self._by_name[name]

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs

    # --- launching --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """Launch on the current backend and stream; returns a Future at once."""
        with LOCK:   # one thread's launch at a time checks and records (host_lock)
            plan = self._last_plan   # the fast path: the same arguments as the last launch
            # Fast paths only under the environment's PDL choice: their plans were made under it.
            plain = graph_var.get() is None and pdl_var.get() is None
            if not self.unsafe and plain and not launching_disabled_var.get():
                try:
                    backend = current_backend()   # a bad setting is raised here as the full path raises it
                    if plan is not None and plan.matches(args, kwargs, None, backend):
                        return plan.launch()      # (its errors, e.g. the sanitizer's, are cleaned below)
                    future = self._layouts.launch(args, kwargs, None, backend)
                    if future is MISS:   # both fast paths were tried: straight to the full checks
                        future = self._launch_in_full(args, kwargs, None, False, backend, None)
                except TileSafeError as e:
                    raise _clean(e) from None
                return future
            return self._call_slowly(args, kwargs)

    def cached_entry(self, kwargs: dict, grid=None):
        """The launch cache's verdicts for keyword arguments of a layout launched before (a
        library call's plan keeps them for `launch_entry`), or None."""
        return self._layouts.entry(kwargs, grid, current_backend())

    def launch_entry(self, entry, kwargs: dict, grid=None):
        """Launch keyword arguments with the facts of `entry`'s layout but for addresses: the
        launch cache's per-call checks only, without building its key; at any doubt the
        full path decides. The caller makes sure there is no capture, `tilesafe check` or
        other backend (call_plans keys on them)."""
        with LOCK:
            try:
                future = entry.launch(kwargs)
            except TileSafeError as e:
                raise _clean(e) from None
            if future is MISS:
                return self._launch_locked((), kwargs, grid, False)
            return future

    def _call_slowly(self, args, kwargs):
        if self.unsafe:
            raise _clean(LaunchError(f"`{self.name}` is an unsafe kernel and cannot be launched by a plain call",
                                     help=f"use {self.name}.unsafe_launch(*args, grid=...) to take responsibility"))
        return self._launch(args, kwargs, None, False)

    def launch(self, *args, grid=None, **kwargs):
        """Launch with an explicit grid (it must match the partitions, see S5)."""
        if self.unsafe:
            raise _clean(LaunchError(f"`{self.name}` is an unsafe kernel",
                                     help=f"use {self.name}.unsafe_launch(*args, grid=...)"))
        return self._launch(args, kwargs, grid, False)

    def unsafe_launch(self, *args, grid=None, **kwargs):
        """Launch an unsafe kernel (pointers, atomics); the reference backend sanitizes it."""
        if not self.unsafe:
            raise _clean(LaunchError(f"`{self.name}` is a safe kernel; call it directly",
                                     help=f"{self.name}(*args)"))
        return self._launch(args, kwargs, grid, True)

    def _launch(self, args, kwargs, grid, unsafe):
        with LOCK:
            return self._launch_locked(args, kwargs, grid, unsafe)

    def _launch_locked(self, args, kwargs, grid, unsafe):
        if launching_disabled_var.get():
            if (seen := refused_launch_var.get()) is not None:   # tilesafe check --target compiles it
                seen(self, args, kwargs, grid)
            raise _clean(LaunchError(f"launching `{self.name}` is disabled here (tilesafe check imports files "
                                     "without running kernels)"))
        capture = graph_var.get()
        plan = self._last_plan
        try:
            backend = current_backend()   # a bad TILESAFE_BACKEND: the user's error, located, no frames of ours
            if capture is not None:   # S12: only what the graph can replay may be captured
                capture.admit(self.name, backend)
            elif pdl_var.get() is not None:
                pass                   # a PDL choice other than the environment's: checked in full, not cached
            elif plan is not None and plan.matches(args, kwargs, grid, backend):
                return plan.launch()   # inside a capture every launch is checked in full (admit_arguments)
            elif not unsafe and (future := self._layouts.launch(args, kwargs, grid, backend)) is not MISS:
                return future
            return self._launch_in_full(args, kwargs, grid, unsafe, backend, capture)
        except TileSafeError as e:
            raise _clean(e) from None

    def _launch_in_full(self, args, kwargs, grid, unsafe, backend, capture):
        """Bind, check, specialize and run; remember the launch for the fast paths. The caller
        holds the lock and cleans the errors."""
        if kwargs.get("tile") is AUTO and "tile" not in self._by_name:
            raise LaunchError(f"`{self.name}` is not autotuned, so tile=ts.auto has no tuned tile to use",
                              help="put @ts.autotune(configs=[ts.Config(...)], key=[...]) above @ts.kernel, "
                                   "or pass the output partitioned yourself, e.g. z.partition((128,))")
        plain_kwargs, sched = take_schedule(kwargs, self.schedule)
        if pdl_launches():     # part of the specialization key; the CPU backends ignore it
            sched = with_pdl(sched)
        bound = binding.bind(self, args, plain_kwargs, grid, unsafe)
        if capture is not None:
            capture.admit_arguments(self.name, bound)
        if sched is not None and sched.pdl and not unsafe and reads_early():
            sched = early_reads(self, bound, sched)   # frozen inputs read before the wait (never cached below)
        self._check_preconditions(bound)
        compiled = self.specializer.compiled(bound, backend, sched)
        safety.check_launch(self, bound, compiled.spec)
        future = execute(compiled, bound)
        self.last_launch = Launched(bound, compiled)
        # Torch arguments are wrapped per launch: no identity to reuse. A plan made inside
        # a capture is not kept: its S14 check counted writes that happen only at replay.
        if capture is None and not unsafe and pdl_var.get() is None:
            self._layouts.remember(args, kwargs, grid, backend, bound, compiled, sched)
            if not bound.borrowed:
                self._last_plan = LaunchPlan(args, kwargs, grid, backend, compiled, bound)
        return future

    def _check_preconditions(self, bound) -> None:
        def lookup(key):
            if isinstance(key, tuple):
                _, name, axis = key
                if name not in bound.tensors:
                    raise LaunchError(f"a precondition of `{self.name}` uses dim() of `{name}`, which is not a tensor")
                return bound.tensors[name].shape[axis]
            if key in bound.scalars:
                return bound.scalars[key]
            return bound.consts[key]
        for pre in self.preconditions:
            pre.check(lookup, self.name)

    # --- inspection without running -----------------------------------------------------------
    def _spec(self, args, kwargs):
        grid = kwargs.pop("grid", None)
        try:
            kwargs, _ = take_schedule(kwargs, None)
            bound = binding.bind(self, args, kwargs, grid, self.unsafe)
            self._check_preconditions(bound)
            return bound
        except TileSafeError as e:
            raise _clean(e) from None

    def ir(self, *args, **kwargs) -> str:
        """The typed tile IR for these arguments or `ts.spec`s, as text."""
        from ..lang.ir import format_function
        bound = self._spec(args, kwargs)
        try:
            return format_function(self.specializer.spec(bound).fn)
        except TileSafeError as e:
            raise _clean(e) from None

    def checks(self, *args, target=None, **kwargs):
        """The S11 report: how many accesses are proven statically, by launch facts, or masked.
        It is decided on the IR, so it is the same for every `target`; with one, the report
        also notes the schedule hints that target leaves out (e.g. `pdl` on AMD)."""
        _, sched = take_schedule(kwargs, self.schedule)
        bound = self._spec(args, kwargs)
        try:
            report = self.specializer.report(bound)
            return report if target is None else _target_notes(self, bound, report, target, sched)
        except TileSafeError as e:
            raise _clean(e) from None

    def compile(self, *args, backend=None, target=None, **kwargs):
        """Specialize and compile for these arguments without running. With `target` ("sm_90",
        "sm_100", "gfx942", "gfx950") compile ahead for that GPU through Triton, on any
        machine, and return Triton's compiled kernel (`.asm["ptx"]` or `.asm["amdgcn"]`)."""
        _, sched = take_schedule(kwargs, self.schedule)
        if target is not None:
            return self._compile_for(target, backend, args, kwargs, sched)
        bound = self._spec(args, kwargs)
        try:
            return self.specializer.compiled(bound, backend or current_backend(), sched)
        except TileSafeError as e:
            raise _clean(e) from None

    def _compile_for(self, target, backend, args, kwargs, sched):
        from .compile_ahead import compile_ahead
        try:
            if backend not in (None, "triton"):
                raise LaunchError(f"target={target!r} compiles through Triton, not the {backend} backend",
                                  help="drop backend= (a target is always compiled by Triton)")
            kwargs, _ = take_schedule(kwargs, None)   # compile_ahead binds (S6) and checks the preconditions
            return compile_ahead(self, *args, target=target, descriptors=None, schedule=sched, **kwargs)
        except TileSafeError as e:
            raise _clean(e) from None

    def source(self, *args, **kwargs) -> str:
        """The generated Triton source for these arguments."""
        bound = self._spec(args, kwargs)
        try:
            return self.specializer.triton_source(bound)
        except TileSafeError as e:
            raise _clean(e) from None

    def __repr__(self) -> str:
        return f"<tilesafe kernel {self.name}{' (unsafe)' if self.unsafe else ''}>"


def _target_notes(kernel, bound, report, target, sched):
    """`report` with what a compile for `target` leaves out; a forced hint it lacks is refused."""
    import dataclasses
    from ..backends.triton import targets
    from ..lang.ir import walk
    t = targets.resolve(target)
    targets.check_schedule(t, sched)
    multiplies = any(op.opcode == "mma" for op in walk(kernel.specializer.spec(bound).fn.body))
    return dataclasses.replace(report, notes=targets.notes(t, sched, multiplies))


_clean = at_callers_line     # errors.py: located at the user's line, our frames dropped


def kernel(fn=None, *, unsafe: bool = False, preconditions=(), deny_kernel_checks: bool = False, sanitize=None,
           schedule=None):
    """Define a tile kernel. `@ts.kernel` or `@ts.kernel(unsafe=..., preconditions=[...], ...)`."""
    def make(f):
        try:
            return Kernel(f, unsafe, preconditions, deny_kernel_checks, sanitize, schedule)
        except KernelError as e:
            raise _clean(e) from None
    return make(fn) if fn is not None else make

