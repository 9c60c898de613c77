"""Running a specialization through Triton: on a GPU ("triton") or under Triton's CPU
interpreter ("triton-interpreter").

`TritonBackend.get(name).compile(kernel, spec, masks, wide, bound)` (called by the
specializer, which caches the result per code key) generates the source and loads it;
`.run(bound)` packs the launch arguments, launches, records what the launch wrote (S14)
and returns a `Future` — with a CUDA event on a GPU, already done under the interpreter.
"""
from __future__ import annotations

from ...errors import LaunchError
from ...lang.annotations import MUT_TILES
from ...lang.coverage import definitely_written, loaded_outputs
from ...lang.ir import walk
from ...runtime.future import Future
from ...runtime.safety import mark_written
from ...settings import SETTINGS
from . import adapter, codegen, targets, tma

NAMES = ("triton", "triton-interpreter")
INTERPRETER_PERSISTENT_GRID = 3   # small, so every persistent loop runs several tiles per block
OCCUPANCY = 1                     # persistent blocks per SM on a GPU
_INTERPRETER_DTYPES = ("bf16", "f8e4m3fn", "f8e5m2")


class TritonBackend:
    """One per backend name. `descriptors` decides TMA tensor descriptors for every kernel:
    None (the default) leaves it to each launch (`use_descriptors`), True/False force it."""
    _shared: dict = {}

    def __init__(self, name: str, descriptors: bool | None = None):
        import os
        # Triton's own compiled-kernel cache lives under ours unless the user placed it.
        os.environ.setdefault("TRITON_CACHE_DIR", str(SETTINGS.cache_dir / "triton-cache"))
        self.name = name
        self.interpret = name == "triton-interpreter"
        self.descriptors = descriptors
        self._loaded: dict[str, object] = {}   # source text -> launchable function

    @classmethod
    def get(cls, name: str) -> "TritonBackend":
        if name not in NAMES:
            raise LaunchError(f"{name!r} is not a Triton backend", help=f"use one of {', '.join(NAMES)}")
        _require_triton()
        if name == "triton":
            _require_cuda()
        backend = cls._shared.get(name)
        if backend is None:
            backend = cls._shared[name] = cls(name)
        return backend

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
        self.reversed_axes = schedule.reverse_blocks if schedule is not None else ()
        self.multiplies = any(op.opcode == "mma" for op in walk(spec.fn.body))
        self.kernel = kernel
        self.spec = spec
        self.masks = masks
        self.wide = wide
        self.written = definitely_written(spec.fn)
        self._reloaded = loaded_outputs(spec.fn)
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
                                   column_major, self.reversed_axes, self.pdl)
            v = self._variants[key] = (gen, self.backend.load(gen))
        self.last_generated = v[0]   # what the latest launch ran (the benchmark twins mirror it)
        return v

    def run(self, bound) -> Future:
        tensors = {name: f.tensor._torch() for name, f in bound.tensors.items()}
        if not self.backend.interpret:
            _check_devices(self.kernel, tensors)
        grid = tuple(bound.grid) if bound.grid else (self._persistent_grid(bound, tensors),)
        linear = needs_linear_grid(grid)
        gen, fn = self.variant(*self._descriptor_choice(tensors, linear))
        counters = self._counters(gen, tensors, grid)
        args = launch_values(gen, bound, tensors, grid, counters)
        grid = flat_grid(grid) if linear else grid
        outputs = tuple(bound.tensors[n].obj for n in self.kernel.outputs)
        if self.backend.interpret:
            if all(g > 0 for g in grid):
                adapter.launch(fn, grid, args, interpret=True)
            mark_written(bound, self.written)
            return Future(outputs)
        return self._run_on_gpu(bound, tensors, fn, grid, args, outputs, counters)

    def prepare(self, bound):
        """A launcher for repeating this launch (the launch fast path), or None."""
        if self.backend.interpret:
            return None
        from .prepared_launch import PreparedLaunch
        tensors = {name: f.tensor._torch() for name, f in bound.tensors.items()}
        grid = tuple(bound.grid) if bound.grid else (self._persistent_grid(bound, tensors),)
        if not all(g > 0 for g in grid):
            return None
        # Same argument objects on every repeat: same pointers, so the same descriptor choice.
        linear = needs_linear_grid(grid)
        gen, fn = self.variant(*self._descriptor_choice(tensors, linear))
        counters = self._counters(gen, tensors, grid)
        args = launch_values(gen, bound, tensors, grid, counters)
        return PreparedLaunch(self, bound, fn, flat_grid(grid) if linear else grid, args, self.options, counters)

    @staticmethod
    def _counters(gen, tensors, grid):
        """S16: the device's ticket counters (a tilesafe tensor) when the kernel takes them."""
        if not any(s.what == "arrivals" for s in gen.args):
            return None
        from ...runtime import arrivals
        device = next(iter(tensors.values())).device
        return arrivals.counters(device, arrivals.groups_of(grid))

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

    def _run_on_gpu(self, bound, tensors, fn, grid, args, outputs, counters=None) -> Future:
        """Order after conflicting work on other streams (S10), launch on the current stream,
        record the launch's event; inside `ts.graph()` register the accesses with the graph."""
        import torch
        from ...runtime import ordering
        from ...settings import graph_var
        device = next(iter(tensors.values())).device if tensors else torch.device("cuda")
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream()
            capture = graph_var.get()
            extra = () if counters is None else (counters,)   # written by every launch that takes them
            if capture is None:
                ordering.order_before(self.kernel, bound, stream, extra)
            if all(g > 0 for g in grid):
                adapter.launch(fn, grid, args, interpret=False, options=self.options)
            mark_written(bound, self.written)
            if capture is not None:
                for name, f in bound.tensors.items():
                    capture.record(f.tensor, ordering.writes(self.kernel, name))
                for t in extra:
                    capture.record(t, True)
                return Future(outputs)
            return ordering.record_after(self.kernel, bound, stream, outputs, extra)

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


MAX_GRID_YZ = 65535   # CUDA's limit on grid axes 1 and 2


def needs_linear_grid(grid) -> bool:
    return any(g > MAX_GRID_YZ for g in grid[1:])


def flat_grid(grid) -> tuple[int]:
    n = 1
    for g in grid:
        n *= g
    return (n,)


def launch_values(gen, bound, tensors, grid=(), counters=None) -> list:
    """The generated function's arguments, in its order (see codegen.ArgSlot)."""
    values = []
    for slot in gen.args:
        if slot.what == "arrivals":
            values.append(counters._torch())
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


def compile_ahead(kernel, *args, target="sm_90", arch: int | None = None, descriptors: bool | None = False, grid=None,
                  schedule=None, **kwargs):
    """`triton.compile` a kernel for a GPU `target` ("sm_90", "sm_100", "gfx942", "gfx950";
    `arch=90` is the older spelling of "sm_90") from `ts.spec`s or tensors, without a GPU;
    returns Triton's compiled kernel (`.asm["ptx"]` or `.asm["amdgcn"]`, `.asm["ttgir"]`, ...).
    Pointers are taken as 16-byte aligned; with `descriptors`, eligible tensors use TMA
    (None: as a launch on that GPU would choose, from `schedule.tma` and the kernel). A hint
    the target lacks is a LaunchError when forced (`targets.check_schedule`)."""
    from ...lang import bounds
    from ...runtime import binding
    from ...runtime.specialize import LaunchFacts, _deny, _needs_64bit
    target = targets.resolve(f"sm_{arch}" if arch is not None else target)
    targets.check_schedule(target, schedule)
    bound = binding.bind(kernel, args, kwargs, grid, kernel.unsafe)
    spec = kernel.specializer.spec(bound)
    masks = bounds.masks_for(spec.checks, LaunchFacts(bound))
    if kernel.deny_kernel_checks:   # refused as a launch would refuse it, whatever the target
        _deny(kernel, spec, masks)
    forced = descriptors if descriptors is not None else schedule.tma if schedule is not None else None
    if forced and not target.tma:
        raise LaunchError(f"TMA descriptors were forced for `{kernel.name}`, but target {target.name} has no TMA",
                          help="compile with descriptors=False (or None: the target's choice)")
    use, any_rank = tma.policy(forced, any(op.opcode == "mma" for op in walk(spec.fn.body)), target.tma)
    rows = cols = frozenset()
    if use:
        arrays = {n: (f.shape, f.strides, f.dtype.itemsize, 0) for n, f in bound.tensors.items()}
        rows, cols = tma.choose(kernel, loaded_outputs(spec.fn), arrays, any_rank)
    pdl = schedule is not None and schedule.pdl and target.pdl
    gen = codegen.generate(kernel, spec, masks, _needs_64bit(bound), rows, column_major=cols,
                           reversed_axes=schedule.reverse_blocks if schedule is not None else (), pdl=pdl)
    values = []
    for slot in gen.args:
        f = bound.tensors.get(slot.param)
        values.append({"ptr": None, "arrivals": None, "extent": f and f.shape[slot.axis], "stride": f and f.strides[slot.axis],
                       "numel": f and _numel(f.shape)}.get(slot.what, bound.scalars.get(slot.param)))
    return adapter.compile_for(gen, values, SETTINGS.cache_dir, target.gpu_target(),
                               **targets.triton_options(target, schedule))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


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

