"""Running a specialization through Triton: on a GPU ("triton") or under Triton's CPU
interpreter ("triton-interpreter").

`TritonBackend.get(name).compile(kernel, spec, masks, wide, bound)` (called by the
specializer, which caches the result per code key) generates the source and loads it;
`.launch(bound)` checks the devices, picks the variant (TMA descriptors, a linear grid)
and returns a `TritonLaunch`, which the runtime orders, starts on the current stream and
records (backends/protocol.py). Ahead-of-time compiles for a GPU target: ahead.py.
"""
from __future__ import annotations

import math

from ...errors import LaunchError
from ...lang.annotations import MUT_TILES
from ...lang.coverage import loaded_outputs
from ...lang.ir import walk
from ...settings import SETTINGS
from ..registry import backend_named
from . import adapter, codegen, targets, tma
from .compile_errors import compile_error

NAMES = ("triton", "triton-interpreter")
INTERPRETER_PERSISTENT_GRID = 3   # small, so every persistent loop runs several tiles per block
OCCUPANCY = 1                     # persistent blocks per SM on a GPU
_INTERPRETER_DTYPES = ("bf16", "f8e4m3fn", "f8e5m2")


class TritonBackend:
    """One per backend name, kept by the registry. `descriptors` decides TMA tensor descriptors
    for every kernel: None (the default) leaves it to each launch (`use_descriptors`),
    True/False force it."""

    def __init__(self, name: str, descriptors: bool | None = None):
        import os
        # Triton's own compiled-kernel cache lives under ours unless the user placed it.
        os.environ.setdefault("TRITON_CACHE_DIR", str(SETTINGS.cache_dir / "triton-cache"))
        self.name = name
        self.interpret = name == "triton-interpreter"
        self.descriptors = descriptors
        self._loaded: dict[str, object] = {}   # source text -> launchable function

    @classmethod
    def make(cls, name: str) -> "TritonBackend":
        """A new backend (the registry's factory: it makes one per name)."""
        _require_usable(name)
        return cls(name)

    @classmethod
    def get(cls, name: str) -> "TritonBackend":
        """The backend called `name`, as the registry holds it."""
        _require_usable(name)
        return backend_named(name)

    def compile(self, kernel, spec, masks, wide, bound, schedule=None) -> "TritonCompiled":
        if self.interpret:
            _refuse_interpreter_dtypes(kernel, spec.fn)
        return TritonCompiled(self, kernel, spec, masks, wide, schedule)

    def load(self, generated):
        fn = self._loaded.get(generated.text)
        if fn is None:
            fn = self._loaded[generated.text] = adapter.load(generated, SETTINGS.cache_dir, self.interpret)
        return fn


class TritonCompiled:
    def __init__(self, backend: TritonBackend, kernel, spec, masks, wide: bool, schedule=None):
        self.backend = backend
        if not backend.interpret and (gpu := targets.device_target()) is not None:
            targets.check_schedule(gpu, schedule)   # e.g. waves_per_eu on NVIDIA: refused, not ignored
        self.options = schedule.options() if schedule is not None else {}   # Triton launch options
        # PDL needs Hopper's griddepcontrol; elsewhere (and interpreted) the launch is plain.
        self.pdl = bool(schedule is not None and schedule.pdl and not backend.interpret and tma.available())
        if self.pdl:
            self.options = dict(self.options, launch_pdl=True)
        self.tma = schedule.tma if schedule is not None else None
        self.early = schedule.early if self.pdl else frozenset()   # frozen Refs read before the PDL wait
        self.reversed_axes = schedule.reverse_blocks if schedule is not None else ()
        self.multiplies = any(op.opcode == "mma" for op in walk(spec.fn.body))
        self.kernel = kernel
        self.spec = spec
        self.masks = masks
        self.wide = wide
        self.written = spec.written
        self._reloaded = loaded_outputs(spec.fn)
        # S16: the kernel takes ticket counters (as codegen.generate decides, for every variant).
        self.takes_tickets = any(op.opcode == "arrive" for op in spec.fn.body.ops)
        self._variants: dict = {}   # descriptor tensors -> (Generated, launchable)
        self.generated, _ = self.variant(frozenset())

    @property
    def source(self) -> str:
        """The pointer-path source (what `kernel.source()` shows)."""
        return self.generated.text

    @property
    def sources(self) -> dict:
        """Every variant generated so far: descriptor tensors -> source text."""
        return {k[0]: gen.text for k, (gen, _) in self._variants.items() if not k[1]}

    def variant(self, descriptors: frozenset, linear_grid: bool = False, column_major: frozenset = frozenset()):
        key = (descriptors, linear_grid, column_major)
        v = self._variants.get(key)
        if v is None:
            gen = codegen.generate(self.kernel, self.spec, self.masks, self.wide, descriptors, linear_grid,
                                   column_major, self.reversed_axes, self.pdl, self.early)
            v = self._variants[key] = (gen, self.backend.load(gen))
        self.last_generated = v[0]   # what the latest launch ran (the benchmark twins mirror it)
        return v

    def launch(self, bound) -> "TritonLaunch":
        tensors = {name: f.tensor._torch() for name, f in bound.tensors.items()}
        if not self.backend.interpret:
            _check_devices(self.kernel, tensors)
        grid = tuple(bound.grid) if bound.grid else (self._persistent_grid(bound, tensors),)
        linear = needs_linear_grid(grid)
        gen, fn = self.variant(*self._descriptor_choice(tensors, linear))
        return TritonLaunch(self, bound, tensors, grid, linear, gen, fn)

    def use_descriptors(self) -> bool:
        """TMA tensor descriptors for this kernel's eligible accesses: the launch's schedule
        (`tma=`), else the backend's setting, else on for tile products (`ts.mma`) on a
        Hopper or newer GPU, where TMA feeds the tensor cores' pipeline best."""
        return self._tma_policy()[0]

    def _tma_policy(self) -> tuple[bool, bool]:
        forced = self.tma if self.tma is not None else self.backend.descriptors
        hopper = not self.backend.interpret and tma.available()
        if forced and not self.backend.interpret and not hopper:
            forced = False              # a config's tma=True on a GPU without TMA: pointers
        return tma.policy(forced, self.multiplies, hopper)

    def _persistent_grid(self, bound, tensors) -> int:
        tiles = 1
        for name, f in bound.tensors.items():
            if self.kernel.param(name).kind == MUT_TILES:
                n = 1
                for extent, t in zip(f.shape, f.tile):
                    n *= -(-extent // t)
                tiles = max(tiles, n)
        if self.backend.interpret:
            return INTERPRETER_PERSISTENT_GRID
        import torch
        device = next((t.device for t in tensors.values() if t.is_cuda), torch.device("cuda"))
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return max(1, min(tiles, sms * OCCUPANCY))

    def _descriptor_choice(self, tensors, linear: bool):
        """`variant`'s arguments: the tensors that use TMA (and which of them by columns)."""
        use, any_rank = self._tma_policy()
        if not use:
            return frozenset(), linear, frozenset()
        arrays = {name: (t.shape, t.stride(), t.element_size(), t.data_ptr()) for name, t in tensors.items()}
        rows, cols = tma.choose(self.kernel, self._reloaded, arrays, any_rank)
        return rows, linear, cols


class TritonLaunch:
    """One launch of a Triton specialization (see backends/protocol.Launch): on a GPU it is
    enqueued on the current stream; under the interpreter it has run when `start` returns."""
    __slots__ = ("compiled", "bound", "tensors", "grid", "linear", "gen", "fn", "device", "synchronous", "tickets",
                 "pointer_writes")

    def __init__(self, compiled: TritonCompiled, bound, tensors, grid, linear, gen, fn):
        self.compiled, self.bound, self.tensors, self.grid, self.linear, self.gen, self.fn = \
            compiled, bound, tensors, grid, linear, gen, fn
        self.synchronous = compiled.backend.interpret
        first = next(iter(tensors.values()), None)
        if first is not None:
            self.device = first.device
        else:
            import torch
            self.device = torch.device("cpu" if self.synchronous else "cuda")
        # S16: one ticket counter per group of blocks, when the kernel takes them.
        self.tickets = groups_of(grid) if compiled.takes_tickets else 0
        self.pointer_writes = {}

    def start(self, counters=None) -> None:
        args = launch_values(self.gen, self.bound, self.tensors, self.grid, counters)
        if all(g > 0 for g in self.grid):
            grid = flat_grid(self.grid) if self.linear else self.grid
            try:   # a first launch compiles: a compiler failure is a CompileError (compile_errors.py)
                adapter.launch(self.fn, grid, args, interpret=self.synchronous, options=self.compiled.options)
            except Exception as e:
                if (failed := compile_error(self.compiled.kernel, e)) is None:
                    raise
                raise failed from None

    def direct(self, counters=None):
        """`(start, args)`: Triton's launcher for this very launch, skipping its dispatcher
        (same argument objects on every repeat: same pointers, extents, strides and grid)."""
        if self.synchronous or not all(g > 0 for g in self.grid):
            return None
        grid = flat_grid(self.grid) if self.linear else self.grid
        args = tuple(launch_values(self.gen, self.bound, self.tensors, self.grid, counters))
        grid3 = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        try:
            kernel = adapter.compiled_kernel(self.fn, grid, list(args), self.compiled.options)
        except Exception as e:
            if (failed := compile_error(self.compiled.kernel, e)) is None:
                raise
            raise failed from None
        return adapter.direct_launcher(kernel, grid3), args

    def relauncher(self):
        """`(start, values)`: Triton's launcher of this launch's compiled kernel, which every
        launch of the same layout uses (Triton specializes on the extents, strides, scalars and
        16-byte alignment this layout fixes), and `values(bound, tensors)`, the arguments of
        such a launch: its own pointers and TMA descriptors, filled into the layout's tuple
        (`layout_slots`; the runtime scalars are this launch's: a relauncher serves one set of
        them). None for a launch that takes S16's counters (made per launch) or that the
        direct path cannot start."""
        found = self.layout_slots()
        if found is None:
            return None
        start, values, pointers, descriptors = found

        def fill(bound, tensors) -> tuple:   # the layout's tuple with this launch's memory in it
            args = list(values)
            for i, param in pointers:
                args[i] = tensors[param].data_ptr()
            for i, param, box, by_columns in descriptors:
                args[i] = tma.host_descriptor(tensors[param], box, by_columns)
            return tuple(args)
        return start, fill

    def layout_slots(self):
        """`(start, values, pointers, descriptors)` for launching this layout with other
        memory from a prebuilt argument tuple (runtime/planned_launch.py): `values` is this
        launch's arguments without its memory (None there), `pointers` the positions that
        take a tensor's address (position, parameter), `descriptors` those that take a TMA
        descriptor of it (position, parameter, box, by columns). Every other argument
        (extents, strides, scalars, grid) is a fact of the layout and its scalars. None where
        the direct path cannot start, or for S16's counters (made per launch)."""
        if self.tickets:
            return None
        direct = self.direct(None)
        if direct is None:
            return None
        pointers, descriptors, values = [], [], list(direct[1])
        for i, slot in enumerate(self.gen.args):
            if slot.what == "ptr":
                pointers.append((i, slot.param))
            elif slot.what == "desc":
                descriptors.append((i, slot.param, slot.box, slot.param in self.gen.column_major))
            else:
                continue
            values[i] = None        # this launch's memory: the caller's plan must not keep it alive
        return direct[0], tuple(values), tuple(pointers), tuple(descriptors)


MAX_GRID_YZ = 65535   # CUDA's limit on grid axes 1 and 2


def groups_of(grid) -> int:
    """Groups of a launch grid for S16's counters: blocks that share every index but axis 0's."""
    return math.prod(tuple(grid)[1:])


def needs_linear_grid(grid) -> bool:
    return any(g > MAX_GRID_YZ for g in grid[1:])


def flat_grid(grid) -> tuple[int]:
    return (math.prod(grid),)


def launch_values(gen, bound, tensors, grid=(), counters=None) -> list:
    """The generated function's arguments, in its order (see emitter.ArgSlot)."""
    values = []
    for slot in gen.args:
        if slot.what == "arrivals":
            values.append(counters)
        elif slot.what == "grid":
            values.append(int(grid[slot.axis]) if slot.axis < len(grid) else 1)
        elif slot.what == "ptr":
            values.append(tensors[slot.param])
        elif slot.what == "extent":
            values.append(int(tensors[slot.param].shape[slot.axis]))
        elif slot.what == "stride":
            values.append(int(tensors[slot.param].stride(slot.axis)))
        elif slot.what == "numel":
            values.append(int(tensors[slot.param].numel()))
        elif slot.what == "desc":
            values.append(tma.host_descriptor(tensors[slot.param], slot.box, slot.param in gen.column_major))
        else:
            v = bound.scalars[slot.param]
            values.append(float(v) if slot.dtype.is_float else bool(v) if slot.dtype.is_bool else int(v))
    return values


def _require_usable(name: str) -> None:
    if name not in NAMES:
        raise LaunchError(f"{name!r} is not a Triton backend", help=f"use one of {', '.join(NAMES)}")
    _require_triton()
    if name == "triton":
        _require_cuda()


def _require_triton() -> None:
    try:
        import triton
    except ImportError:
        raise LaunchError("the Triton backends need the `triton` package, which is not installed",
                          help="pip install 'tilesafe[triton]', or run on the reference backend") from None
    from .tested_version import warn_if_untested
    warn_if_untested(triton.__version__)


def _require_cuda() -> None:
    import torch
    if not torch.cuda.is_available():
        raise LaunchError("the `triton` backend needs a CUDA GPU, and none is available",
                          help="run the generated Triton on the CPU with ts.backend(\"triton-interpreter\") "
                               "(or TILESAFE_BACKEND=triton-interpreter), or use the reference backend")


def _check_devices(kernel, tensors) -> None:
    for name, t in tensors.items():
        if not t.is_cuda:
            raise LaunchError(f"argument `{name}` of `{kernel.name}` is in {t.device.type} memory, but the `triton` "
                              "backend runs on the GPU",
                              help="create it on the GPU (device=\"cuda\"), or run on the triton-interpreter backend")


def _refuse_interpreter_dtypes(kernel, fn) -> None:
    used = {p.value.dtype.name for p in fn.params if p.value is not None}
    for op in walk(fn.body):
        used.update(r.dtype.name for r in op.results)
        if op.opcode == "cast":
            used.add(op.attrs["dtype"].name)
    bad = sorted(used & set(_INTERPRETER_DTYPES))
    if bad:
        raise LaunchError(f"`{kernel.name}` uses {', '.join(bad)}, which Triton 3.6's interpreter cannot run "
                          "correctly (it computes bf16 wrongly and mis-casts fp8)",
                          help="run it with ts.backend(\"reference\") on the CPU, or with the `triton` backend on a GPU")

