"""`@simt.kernel(contract=...)`: a SIMT kernel, checked when it is defined.

The pipeline, in order: read the source and parameters (params.py); check the body's rules
(analysis.py: writes through permits, divergence, bounds proofs), then shared memory's
phases (shared_phases.py, which needs the shared arrays the analysis found); then the
contract against the static shared memory (contract.py, which needs the declarations); then
build the CPU executor's per-thread generator (interpret.py). GPU code is generated and
compiled per specialization at the first launch on a GPU (lower_numba.py, gpu_launch.py).
"""
from __future__ import annotations

import inspect

from ..errors import KernelError, LaunchError, TileSafeError, at_callers_line
from ..lang.source import KernelSource
from ..runtime.host_lock import LOCK
from . import contract as C
from .analysis import analyse, shared_bytes
from .binding import bind
from .constant import CONSTANT_LIMIT
from .interpret import thread_function
from .launch import RuntimeView, launch
from .lower_numba import kernel_source, lowered_kernel, table_global, written_targets
from .numba_errors import kernel_error
from .params import ATOMIC, CONST, REF, SUPPORTED_DTYPES, parse_params
from .shared_phases import check_phases


class SimtKernel:
    def __init__(self, fn, contract, unsafe=False, sanitize=False):
        self.fn, self.name, self.contract, self.unsafe = fn, fn.__name__, contract, unsafe
        if not isinstance(sanitize, bool):
            raise KernelError(f"sanitize= takes True or False, got {sanitize!r}", None)
        self.sanitize = sanitize     # on the GPU: shadow bits report reads of shared memory nobody wrote
        self.src = src = KernelSource.of(fn)
        self.where = src.loc(src.tree.decorator_list[0] if src.tree.decorator_list else src.tree)
        scope = src.globals_and_closure()
        self.scope = scope
        self.params = parse_params(fn, src)
        for p in self.params:
            if p.is_tensor and p.dtype not in SUPPORTED_DTYPES:
                raise src.error(src.tree, f"`{p.name}` has dtype {p.dtype.name}, which SIMT kernels do not take",
                                help="use f16, f32, f64 or an integer dtype")
        self.signature = inspect.signature(fn)
        C.check_definition(contract, 0, self.where, self.where)   # the block, before the body's rules use it
        self.info = analyse(src, self.params, contract, scope, unsafe)
        check_phases(src, self.info, scope)
        table_bytes = sum(t.array.nbytes for t in self.info.tables.values())
        if table_bytes > CONSTANT_LIMIT:
            raise KernelError(f"the kernel's constant tables hold {table_bytes} bytes, more than constant memory "
                              f"({CONSTANT_LIMIT} bytes)", self.where, help="pass large data as a simt.Ref")
        first = next(iter(self.info.shared.values()), None)
        self.shared_where = src.loc(first.node) if first is not None else self.where
        C.check_definition(contract, shared_bytes(self.info, {}), self.where, self.shared_where)
        self.thread_fn = thread_function(src, self.info, self.params, scope)
        self.block3 = tuple(contract.block) + (1,) * (3 - len(contract.block))
        # a GPU launch reads the error flag at sync when some access is checked: a read, an atomic, an unsafe write
        self.has_checks = bool(self.info.checked or self.info.atomics or self.info.raw_stores) \
            or (sanitize and bool(self.info.shared))
        self.runtime_view = RuntimeView(self.params)
        # what a launch reads, so must have been written (S14): inputs and atomically updated targets
        self.read_names = {p.name for p in self.params if p.kind in (REF, ATOMIC)} | self.info.raw_atomic_targets
        self._compiled: dict = {}
        self.plans: dict = {}           # layout -> LaunchPlan (launch_plans.py)
        self._flags: dict = {}

    def param(self, name):
        return next(p for p in self.params if p.name == name)

    def __call__(self, *args, grid=None, **kwargs):
        """Launch on the arguments' device (and torch's current stream); returns a future at once."""
        if self.unsafe:
            return self.launch(*args, grid=grid, **kwargs)      # refused there
        return self._launch(args, kwargs, grid)

    def launch(self, *args, grid=None, **kwargs):
        """Launch; `grid=` may be given, and must then equal the grid the outputs' permits need."""
        if self.unsafe:
            raise _clean(LaunchError(f"`{self.name}` is an unsafe SIMT kernel and cannot be launched by a plain call",
                                     help=f"use {self.name}.unsafe_launch(*args, grid=...) to take responsibility"))
        return self._launch(args, kwargs, grid)

    def unsafe_launch(self, *args, grid=None, **kwargs):
        """Launch an unsafe kernel (writes at computed indices, raw atomics); the CPU executor checks them."""
        if not self.unsafe:
            raise _clean(LaunchError(f"`{self.name}` is a safe SIMT kernel; call it directly",
                                     help=f"{self.name}(*args)"))
        return self._launch(args, kwargs, grid)

    def _launch(self, args, kwargs, grid):
        try:
            with LOCK:
                return launch(self, args, kwargs, grid)
        except TileSafeError as e:
            raise _clean(e) from None

    def checks(self) -> dict:
        """Where the kernel's reads and atomics stand (as S11's report for tile kernels): how many
        reads are proven in bounds, and the lines of the accesses checked at run time (each
        (tensor, line) once: the analysis follows a while loop's body twice)."""
        line = self.src.loc
        return {"proven_reads": len(self.info.proven),
                "checked_reads": sorted({(name, line(node).line) for name, node in self.info.checked}),
                "checked_atomics": sorted({line(node).line for node in self.info.atomics})}

    def numba_source(self, *args, **kwargs) -> str:
        """The numba-cuda source the GPU runs for these arguments (tensors or torch tensors)."""
        try:
            bound = bind(self, args, kwargs, kwargs.pop("grid", None))
        except TileSafeError as e:
            raise _clean(e) from None
        return self.source_for(bound.consts)

    def source_for(self, consts: dict) -> str:
        return kernel_source(*self._lowering(consts))

    def lowered_for(self, consts: dict):
        """`source_for`'s kernel function as a tree, with the user's line numbers (numba_errors.py)."""
        return lowered_kernel(*self._lowering(consts))

    def _lowering(self, consts: dict) -> tuple:
        return (self.src, self.info, self.params, self.scope, self.contract, consts, f"simt_{self.name}",
                self.sanitize and bool(self.info.shared))

    def gpu_compiled(self, bound, device_index: int):
        from . import gpu_launch
        key = (device_index, tuple(sorted(bound.consts.items())),
               tuple((f.dtype.name, len(f.shape), f.tensor._torch().is_contiguous()) for f in bound.tensors.values()))
        kernel = self._compiled.get(key)
        if kernel is None:
            types = []
            for p in self.params:
                if p.is_tensor:
                    f = bound.tensors[p.name]
                    types.append(gpu_launch.array_type(f.dtype, len(f.shape), f.tensor._torch().is_contiguous()))
                elif p.kind != CONST:
                    types.append(gpu_launch.scalar_type(p.dtype))
            from ..dtypes import i32, u8
            types.append(gpu_launch.array_type(i32, 1, True))
            for name in written_targets(self.info):     # an unsafe kernel's write masks
                types.append(gpu_launch.array_type(u8, len(bound.tensors[name].shape), True))
            try:
                per_sm = self.contract.blocks_per_sm     # launch bounds: a register budget a thread
                bounds = {"launch_bounds": (self.contract.threads, per_sm)} if per_sm else {}
                kernel = gpu_launch.compile_kernel(self.source_for(bound.consts), f"simt_{self.name}", tuple(types),
                                                   device_index, self.table_globals(), **bounds)
            except Exception as e:
                refused = kernel_error(self, bound.consts, e)    # numba's refusal, at the user's line
                if refused is None:
                    raise
                raise refused from None
            self._compiled[key] = kernel
        return kernel

    def table_globals(self) -> dict:
        """The constant tables' arrays, under the names the generated source reads them by."""
        return {table_global(n): t.array for n, t in self.info.tables.items()}

    def error_flag(self, device_index: int):
        flag = self._flags.get(device_index)
        if flag is None:
            import torch
            flag = self._flags[device_index] = torch.zeros(1, dtype=torch.int32, device=f"cuda:{device_index}")
        return flag

    def __repr__(self) -> str:
        return f"<simt kernel {self.name} block={self.contract.block}>"


_clean = at_callers_line     # errors.py: located at the user's line, our frames dropped


def kernel(fn=None, *, contract=None, unsafe=False, sanitize=False):
    """Define a SIMT kernel: `@simt.kernel(contract=simt.Contract(block=(256,)))`.

    `unsafe=True` lets outputs be written at computed indices and take atomics; such a kernel is
    launched only by `k.unsafe_launch(...)`, and the CPU executor checks its accesses and races.
    `sanitize=True`: on the GPU, a read of a shared element nobody wrote is reported at the next
    `sync()` (shadow bits in shared memory; the CPU executor always checks this)."""
    def make(f):
        try:
            return SimtKernel(f, contract if contract is not None else C.Contract(), unsafe, sanitize)
        except KernelError as e:
            raise _clean(e) from None
    return make(fn) if fn is not None else make


