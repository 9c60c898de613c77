"""`@ts.autotune`: pick a kernel's tile, Consts and schedule hints per shape class.

    @ts.autotune(configs=[ts.Config(B=256), ts.Config(B=1024, num_warps=8)], key=["N"])
    @ts.kernel
    def add(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int): ...

    out = add(z, x, tile=ts.auto).sync().unpartition()

With `tile=ts.auto` the outputs are passed as tensors; the launcher partitions each with the
chosen config's tile, which lends it (S8) until the caller unpartitions what `sync()` gives
back. Without it, an autotuned kernel launches exactly like the plain kernel.

A launch with `tile=ts.auto`, in order:
  1. check the arguments the tuner does not see: outputs are usable tensors, and nothing the
     configs choose is also passed;
  2. the shape class: the tensors' dtypes and the `key` parameters' values, ints bucketed to
     the next power of two, so one result serves a range of shapes;
  3. the config: the in-memory cache; else the tuned files (user cache, then committed);
     else tuning (below); a choice is remembered per device and shape class;
  4. partition the outputs with its tile and launch with its Consts and hints. A refused
     launch unpartitions again, so it leaves the tensors as they were.

Tuning. With a timer (CUDA events by default on the `triton` backend; any `timer=` given),
every config runs on scratch copies of the outputs — never on the caller's memory — and is
timed; one that fails is dropped; the fastest wins and is saved to the user cache. Without
one (the CPU backends: their timings mean nothing) the first config that compiles is taken,
recorded as untimed and not saved.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import AliasError, KernelError, LaunchError, OwnershipError, TileSafeError, at_callers_line
from ..lang.annotations import CONST, OUTPUTS
from ..settings import current_backend, graph_var, launching_disabled_var
from .autotune_config import AUTO, Config, Prepared
from .binding import is_torch_tensor
from .kernel import Kernel
from .partition import next_pow2
from .spec import spec as make_spec
from .storage_state import StorageState
from .tensor import Tensor
from .tuned_files import TunedFiles, device_slug

Timer = Callable[[Config, Callable[[], object]], float]   # (config, run) -> milliseconds


@dataclass(frozen=True, slots=True)
class Choice:
    """The config used for one shape class, and how it was found."""
    config: Config
    time_ms: float | None    # None: not timed
    source: str              # "tuned", "untimed", "user cache" or "committed"


class Autotuned:
    """A kernel with autotuning configs. Call it like the kernel; `tile=ts.auto` tunes."""

    def __init__(self, kernel: Kernel, configs, key, timer: Timer | None = None, bucket=None):
        self.kernel = kernel
        self.name = kernel.name
        self.kernel_id = f"{kernel.fn.__module__}.{kernel.fn.__qualname__}"
        self.key = _check_key(kernel, key)
        if not isinstance(configs, (list, tuple)) or not configs:
            raise KernelError(f"@ts.autotune on `{kernel.name}` needs a non-empty list of configs",
                              help="configs=[ts.Config(B=128), ts.Config(B=256, num_warps=8)]")
        self.configs = tuple(Prepared.of(kernel, c, i) for i, c in enumerate(configs))
        self.chosen_names = _chosen_names(kernel, self.configs)
        for name in self.key:
            if name in self.chosen_names:
                raise KernelError(f"key `{name}` of `{kernel.name}` is chosen by the configs, not by the arguments",
                                  help="key names the sizes that define a shape class, e.g. key=['M', 'N', 'K']")
        self.timer = timer
        self.bucket = bucket or next_pow2
        self.files = TunedFiles.default()
        self.cache: dict[tuple[str, str], Choice] = {}   # (device slug, shape class) -> choice
        self.__doc__ = kernel.__doc__
        self.__wrapped__ = kernel.fn

    # --- launching --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """Launch; with `tile=ts.auto` the outputs are tensors and the tuner picks the config."""
        if "tile" not in kwargs:
            return self.kernel(*args, **kwargs)
        return self._auto(args, kwargs, None)

    def launch(self, *args, grid=None, **kwargs):
        """Launch with an explicit grid (persistent kernels); `tile=ts.auto` as for a call."""
        if "tile" not in kwargs:
            return self.kernel.launch(*args, grid=grid, **kwargs)
        return self._auto(args, kwargs, grid)

    def _auto(self, args, kwargs, grid):
        try:
            given, sched = self._given(args, kwargs)
            choice = self._choose(given, sched, grid)
            return self._launch(given, sched, grid, self._prepared(choice.config))
        except TileSafeError as e:
            raise at_callers_line(e) from None

    def _given(self, args, kwargs):
        """Step 1: the arguments by parameter name, and the caller's schedule= if any."""
        kwargs = dict(kwargs)
        tile = kwargs.pop("tile")
        if tile is not AUTO:
            raise LaunchError(f"tile= of `{self.name}` takes ts.auto, got {tile!r}",
                              help="pass tile=ts.auto, or partition the outputs yourself and drop tile=")
        if launching_disabled_var.get():
            raise LaunchError(f"launching `{self.name}` is disabled here (tilesafe check imports files "
                              "without running kernels)")
        sched = kwargs.pop("schedule", None)
        if sched is not None and any(p.config.schedule is not None for p in self.configs):
            raise LaunchError(f"the configs of `{self.name}` choose the schedule, so schedule= cannot be "
                              "passed with tile=ts.auto", help="drop schedule=, or partition the outputs yourself")
        try:
            given = dict(self.kernel.signature.bind_partial(*args, **kwargs).arguments)
        except TypeError as e:
            raise LaunchError(f"bad arguments to `{self.name}`: {e}") from None
        for name in self.kernel.outputs:
            _check_output(self.name, name, given.get(name))
        for name in given:
            if name in self.chosen_names:
                raise LaunchError(f"`{name}` of `{self.name}` is chosen by the autotuner when tile=ts.auto",
                                  help=f"drop {name}=..., or partition the outputs yourself to choose it")
        return given, sched

    def _choose(self, given, sched, grid) -> Choice:
        """Steps 2 and 3: the config for this launch's shape class."""
        backend = current_backend()
        slug = device_slug(backend)
        shape_class = self.shape_class(given)
        choice = self.cache.get((slug, shape_class))
        if choice is None:
            choice = self._stored(slug, shape_class)
        if choice is None:
            if graph_var.get() is not None:
                raise LaunchError(f"`{self.name}` has no tuned config for shape class {shape_class} yet, and "
                                  "tuning cannot run while capturing ts.graph()",
                                  help="launch it once with tile=ts.auto before the `with ts.graph()` block")
            choice = self._tune(given, sched, grid, backend, shape_class)
            if choice.time_ms is not None:
                entry = {**choice.config.to_json(), "time_ms": round(choice.time_ms, 5)}
                self.files.save(slug, self.kernel_id, shape_class, entry)
        self.cache[(slug, shape_class)] = choice
        return choice

    def _launch(self, given, sched, grid, prepared: Prepared):
        """Step 4: partition the outputs with the chosen tile (lending them) and launch."""
        parts = {}
        try:
            for name, tile in prepared.tiles.items():
                parts[name] = given[name].partition(tile)
            return self._run(given, parts, sched, grid, prepared)
        except BaseException:
            for p in parts.values():
                if p._live:
                    p.unpartition()
            raise

    def _run(self, given, parts, sched, grid, prepared: Prepared):
        kwargs = {**given, **parts, **prepared.consts}
        sched = prepared.config.schedule or sched
        if sched is not None:
            kwargs["schedule"] = sched
        return self.kernel(**kwargs) if grid is None else self.kernel.launch(grid=grid, **kwargs)

    # --- the shape class and stored results ---------------------------------------------------
    def shape_class(self, given) -> str:
        """`"f32,f32/N=1024"`: the tensors' dtypes, then each key's (bucketed) value."""
        dtypes = ",".join(_dtype_name(given.get(p.name)) for p in self.kernel.params if p.is_tensor)
        return "/".join([dtypes, *(f"{name}={self._key_value(name, given)}" for name in self.key)])

    def _key_value(self, name, given) -> str:
        p = self.kernel.param(name)
        if p.is_tensor:
            return "x".join(str(self.bucket(n)) for n in _extent(given.get(name)))
        value = given[name] if name in given else self._implied(name, given, p.default)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(self.bucket(value))
        return getattr(value, "name", None) or repr(value)

    def _implied(self, name, given, default):
        """A size the caller left out: the extent of an input whose shape names it."""
        for q in self.kernel.params:
            if q.is_tensor and q.kind not in OUTPUTS and q.name in given and name in q.shape:
                extent = _extent(given[q.name])
                axis = q.shape.index(name)
                if axis < len(extent):
                    return extent[axis]
        return default

    def _stored(self, slug, shape_class) -> Choice | None:
        found = self.files.lookup(slug, self.kernel_id, shape_class)
        if found is None:
            return None
        entry, where = found
        time_ms = entry.get("time_ms")
        config = {k: v for k, v in entry.items() if k != "time_ms"}
        for p in self.configs:   # a config no longer in the list is stale: a miss
            if p.config.to_json() == config:
                ok = isinstance(time_ms, (int, float)) and not isinstance(time_ms, bool)
                return Choice(p.config, float(time_ms) if ok else None, where)
        return None

    def _prepared(self, config: Config) -> Prepared:
        return next(p for p in self.configs if p.config == config)

    # --- tuning -------------------------------------------------------------------------------
    def _tune(self, given, sched, grid, backend, shape_class) -> Choice:
        timer = self.timer or (cuda_timer() if backend == "triton" else None)
        failures, timings = [], []
        for prepared in self.configs:
            try:
                if timer is None:
                    self._compile(given, sched, grid, prepared, backend)
                    return Choice(prepared.config, None, "untimed")
                timings.append((self._time(given, sched, grid, prepared, timer), len(timings), prepared))
            except (OwnershipError, AliasError):
                raise                    # about the caller's memory, whatever the config
            except Exception as e:       # noqa: BLE001 -- any failure drops the candidate
                failures.append((prepared.config, e))
        if timings:
            ms, _, best = min(timings, key=lambda t: t[:2])
            return Choice(best.config, ms, "tuned")
        raise _none_ran(self.name, shape_class, failures)

    def _compile(self, given, sched, grid, prepared: Prepared, backend) -> None:
        specs = {}
        for name, tile in prepared.tiles.items():
            t = given[name]._torch()
            specs[name] = make_spec(tuple(t.shape), given[name]._dtype, tuple(t.stride()), tile)
        kwargs = {**given, **specs, **prepared.consts}
        if grid is not None:
            kwargs["grid"] = grid
        sched = prepared.config.schedule or sched
        if sched is not None:
            kwargs["schedule"] = sched
        self.kernel.compile(backend=backend, **kwargs)

    def _time(self, given, sched, grid, prepared: Prepared, timer: Timer) -> float:
        """Time one config on scratch copies of the outputs; the caller's outputs are untouched."""
        parts = {name: _scratch_like(given[name]).partition(tile) for name, tile in prepared.tiles.items()}
        try:
            ms = timer(prepared.config, lambda: self._run(given, parts, sched, grid, prepared))
        finally:
            for p in parts.values():
                p.unpartition()
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise LaunchError(f"the autotune timer returned {ms!r} for {prepared.config!r}, not a time in ms")
        return float(ms)

    # --- inspection ---------------------------------------------------------------------------
    def ir(self, *args, **kwargs) -> str:
        return self.kernel.ir(*args, **kwargs)

    def checks(self, *args, **kwargs):
        return self.kernel.checks(*args, **kwargs)

    def compile(self, *args, **kwargs):
        return self.kernel.compile(*args, **kwargs)

    def source(self, *args, **kwargs) -> str:
        return self.kernel.source(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tilesafe kernel {self.name} (autotuned over {len(self.configs)} configs, key={list(self.key)})>"


_MISSING = object()


def cuda_timer(warmup: int = 1, reps: int = 5) -> Timer:
    """The default timer on a GPU: `warmup` runs (the first checks the config runs), then the
    median of `reps` runs, each between two CUDA events on the launch's stream."""
    def time(config: Config, run) -> float:
        for _ in range(max(1, warmup)):
            run()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return statistics.median(times)
    return time


def autotune(configs, key=(), *, timer: Timer | None = None, bucket=None):
    """Autotune a kernel over `configs`, per shape class of the `key` parameters.

    Goes above `@ts.kernel`. `key` names parameters whose values (or a tensor parameter's
    shape) define the shape class; ints are bucketed to the next power of two (`bucket=` takes
    another function). `timer(config, run) -> ms` replaces the CUDA-event timer.
    """
    def wrap(k):
        try:
            if not isinstance(k, Kernel):
                # A stand-in for a refused kernel (`tilesafe check`) raises its own error here.
                getattr(k, "params", None)
                raise KernelError(f"@ts.autotune must be applied to a @ts.kernel, got {type(k).__name__}",
                                  help="put @ts.autotune(...) above @ts.kernel")
            if k.unsafe:
                raise KernelError(f"`{k.name}` is an unsafe kernel; autotuning is for safe kernels",
                                  help="launch it with unsafe_launch and an explicit config")
            return Autotuned(k, configs, key, timer, bucket)
        except KernelError as e:
            raise at_callers_line(e) from None
    return wrap


def export(path=None, device: str | None = None) -> Path:
    """Write this machine's tuned results (the user cache) into a committable JSON file.

    `path` defaults to the package's `tuned/<device>.json`; `device` to the current one.
    """
    return TunedFiles.default().export(path, device)


autotune.export = export


def _check_key(kernel: Kernel, key) -> tuple[str, ...]:
    if isinstance(key, str):
        key = [key]
    names = [p.name for p in kernel.params]
    for name in key:
        if name not in names:
            raise KernelError(f"autotune key `{name}` is not a parameter of `{kernel.name}`",
                              help=f"key names parameters whose values define the shape class: "
                                   f"one of {', '.join(names)}")
    return tuple(key)


def _chosen_names(kernel: Kernel, configs) -> frozenset:
    """Every name a config may set: its Consts, and the Consts naming output tiles."""
    names = {n for p in configs for n in p.consts}
    for p in kernel.params:
        if p.kind in OUTPUTS:
            names |= {e for e in p.shape if isinstance(e, str) and kernel.param(e).kind == CONST}
    if "tile" in {p.name for p in kernel.params}:
        raise KernelError(f"`{kernel.name}` has a parameter named `tile`, which clashes with the launch "
                          "keyword tile=ts.auto", help="rename the parameter")
    return frozenset(names)


def _check_output(kernel_name: str, name: str, arg) -> None:
    if isinstance(arg, Tensor):
        arg._check_usable(name)
        return
    if arg is None:
        raise LaunchError(f"`{kernel_name}` is missing the output `{name}`",
                          help=f"pass the tensor to write, e.g. {name}=ts.empty(shape)")
    hint = ("with tile=ts.auto pass the tensor itself; the launcher partitions it"
            if not is_torch_tensor(arg) else "wrap it first: ts.from_torch(t)")
    raise LaunchError(f"output `{name}` of `{kernel_name}` must be a tilesafe tensor when tile=ts.auto, "
                      f"got {type(arg).__name__}", help=hint)


def _extent(arg) -> tuple[int, ...]:
    if isinstance(arg, Tensor):
        return arg.shape
    shape = getattr(arg, "shape", None)
    return tuple(shape) if shape is not None else ()


def _dtype_name(arg) -> str:
    if isinstance(arg, Tensor):
        return arg.dtype.name
    if is_torch_tensor(arg):
        from ..dtypes import from_torch
        try:
            return from_torch(arg.dtype).name
        except ValueError:
            return str(arg.dtype)
    return "?"


def _scratch_like(t: Tensor) -> Tensor:
    """Fresh memory with `t`'s shape, strides and dtype (so the same code is timed), holding a
    copy of `t`'s values when it has any (a kernel may load its own output)."""
    src = t._torch()
    raw = torch.empty_strided(tuple(src.shape), tuple(src.stride()), dtype=src.dtype, device=src.device)
    state = StorageState(raw.untyped_storage().nbytes(), initialised=False)
    scratch = Tensor(raw, StorageState.attach(raw, state))
    if t._state.is_written(src):
        scratch.copy_(t)
    return scratch


def _none_ran(name: str, shape_class: str, failures) -> TileSafeError:
    """All configs failed. The same error for every one is not about configs: raise it as is."""
    messages = [getattr(e, "message", None) or str(e).splitlines()[0] for _, e in failures]
    first = failures[0][1]
    if isinstance(first, TileSafeError) and len(set(messages)) == 1:
        return first
    listed = "; ".join(f"{c!r}: {m}" for (c, _), m in list(zip(failures, messages))[:4])
    more = f"; and {len(failures) - 4} more" if len(failures) > 4 else ""
    return LaunchError(f"none of the {len(failures)} configs of `{name}` runs for shape class {shape_class}: "
                       f"{listed}{more}",
                       help="add a config that fits these shapes (smaller tiles, fewer stages), or launch one "
                            "config with explicit partitions to see its full error")

