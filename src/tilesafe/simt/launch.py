"""Launching a SIMT kernel: the runtime's host rules, then the CPU executor or the GPU.

A repeated launch with the same layout takes its plan (launch_plans.py) and redoes only
the per-launch checks. Otherwise, in this order, before any GPU work: the arguments are bound and the grid derived
(binding.py: S6, S8, S13); the contract's shared memory is checked with the `Const` values
and the device's capability against the contract; no output overlaps another argument or
itself (S7); everything read was written (S14). Then on a GPU the current stream waits for
conflicting work on other streams (S10), the kernel starts on it, and the launch is recorded
as pending (S9/S10) by the runtime's own ordering module; on the CPU the executor runs it to
completion. The outputs a launch covers count as written (S14). A launch inside `ts.graph()`
is recorded into the graph (graph_capture.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import KernelError, LaunchError
from ..runtime import ordering
from ..runtime.freeze import refuse_frozen_write
from ..runtime.future import Future
from ..settings import graph_var, launching_disabled_var
from . import contract as C
from . import cpu_executor, gpu_launch
from . import mappings as M
from . import shared_shadow, write_masks
from .analysis import dynamic_shared, dynamic_shared_bytes, shared_bytes
from .binding import bind, resolved
from .gpu_repeat import GpuRepeat
from .graph_capture import launch_in_capture
from .launch_plans import MAX_PLANS, LaunchPlan, layout
from .lower_numba import written_targets
from .memory_checks import check_aliasing, refuse_unwritten
from .params import ATOMIC, CONST, DISJOINT, REF, SCALAR, WRITTEN
from .simt_future import SimtFuture

_RUNTIME_KINDS = {DISJOINT: "mut", ATOMIC: "ptr", REF: "ref"}   # what runtime/ordering.py reads
_CAPABILITY: dict = {}
_SHARED_LIMIT: dict = {}


@dataclass(frozen=True)
class _Kind:
    kind: str


class RuntimeView:
    """The kernel as the runtime's ordering sees it: which parameters are written."""

    def __init__(self, params):
        self._kinds = {p.name: _Kind(_RUNTIME_KINDS[p.kind]) for p in params if p.is_tensor}

    def param(self, name):
        return self._kinds[name]


def launch(kernel, args, kwargs, grid):
    if launching_disabled_var.get():
        raise LaunchError(f"launching `{kernel.name}` is disabled here (tilesafe check imports files without "
                          "running kernels)")
    key, seen = layout(args, kwargs, grid)
    plan = kernel.plans.get(key) if key is not None else None
    capture = graph_var.get()
    if capture is not None:
        return launch_in_capture(kernel, plan, args, kwargs, capture)
    if plan is not None and plan.repeat is not None:     # a GPU layout launched before: the lean path
        return plan.repeat(seen)
    if plan is not None:
        bound = plan.rebind(kernel, args, kwargs)
    else:
        bound = bind(kernel, args, kwargs, grid)
        _check_shared(kernel, bound.consts)
        dynamic = _check_dynamic_shared(kernel, bound, C.DEVICE_SHARED_LIMIT, "a block")
        _check_memory(kernel, bound)
        plan = LaunchPlan(kernel, bound, args, kwargs)
        plan.dynamic_shared = dynamic
        if key is None:
            plan.seen_at = None      # never looked up again: no lean path to prepare
        else:
            if len(kernel.plans) >= MAX_PLANS:
                kernel.plans.clear()
            kernel.plans[key] = plan
    outputs = plan.passed_outputs(args, kwargs)
    device = next(iter(bound.tensors.values())).tensor._torch().device if bound.tensors else None
    if not _is_gpu(device):
        _run_on_cpu(kernel, bound)
        return SimtFuture(Future(outputs), kernel, None)
    return _run_on_gpu(kernel, bound, device, outputs, plan)


def _is_gpu(device) -> bool:
    """Whether the launch runs on a GPU (benchmarks/profile_simt_host_path.py stubs it to time that path)."""
    return device is not None and device.type == "cuda"


def _check_shared(kernel, consts) -> None:
    if any(isinstance(e, str) for d in kernel.info.shared.values() for e in d.shape):
        try:
            C.check_definition(kernel.contract, shared_bytes(kernel.info, consts), kernel.where,
                               kernel.shared_where)
        except KernelError as e:
            raise KernelError(e.message + f" (with {consts})", e.loc, e.help) from None


def _check_dynamic_shared(kernel, bound, limit: int, where: str) -> int:
    """The bytes of dynamic shared memory this launch gives each block (0 without a dynamic array):
    at least one element, and with the static arrays within the contract and `limit` (LaunchError)."""
    decl = dynamic_shared(kernel.info)
    if decl is None:
        return 0
    size = bound.scalars[decl.shape[0]]
    line = kernel.src.loc(decl.node).line
    what = f"dynamic shared array `{decl.name}` (line {line}) of `{kernel.name}`"
    if size < 1:
        raise LaunchError(f"{what} is sized by `{decl.shape[0]}` = {size}; it needs at least one element",
                          help=f"pass {decl.shape[0]} >= 1")
    dynamic = dynamic_shared_bytes(kernel.info, bound.scalars)
    static = shared_bytes(kernel.info, bound.consts)
    total = dynamic + static
    shown = f"{size} x {decl.dtype.name} = {dynamic} bytes" + (f", plus {static} bytes of static shared memory"
                                                               if static else "")
    cap = kernel.contract.shared_memory
    if cap is not None and total > cap:
        raise LaunchError(f"{what} needs {shown}: more than the contract's shared_memory={cap}",
                          help=f"launch with a smaller `{decl.shape[0]}`, or raise shared_memory= in the contract")
    if total > limit:
        raise LaunchError(f"{what} needs {shown}: more than {where} can have ({limit} bytes)",
                          help=f"launch with a smaller `{decl.shape[0]}`")
    return dynamic


def _check_memory(kernel, bound) -> None:
    """S7: an output shares no byte with another argument or itself, nor a frozen one (ts.freeze).
    S14: what is read was written."""
    check_aliasing(kernel, {n: f.tensor._byte_set() for n, f in bound.tensors.items()})
    for p in kernel.params:
        if p.kind in WRITTEN:
            t = bound.tensors[p.name].tensor
            refuse_frozen_write(kernel.name, p.name, t._state, t._torch())
    for p in kernel.params:
        if p.name in kernel.read_names:
            t = bound.tensors[p.name].tensor
            if not t._state.is_written(t._torch()):
                refuse_unwritten(kernel, p.name)


def _mark_written(kernel, bound, writers=None) -> None:
    """S14: outputs whose walk covers them are initialised; elsewhere the executor's record says
    (what an unsafe kernel wrote at computed indices counts on the CPU only, where it is known)."""
    if 0 in bound.grid:
        return      # no thread ran (a grid-stride walk launched with grid=0): nothing was written
    if writers is not None:
        import torch
        for name in kernel.info.raw_store_targets:
            t = bound.tensors[name].tensor
            t._state.mark_elements_written(t._torch(), torch.from_numpy(writers[name] >= 0))
    for walk in kernel.info.walks:
        if walk.shared:
            continue
        t = bound.tensors[walk.target].tensor
        view = t._torch()
        m = resolved(walk, bound.consts)
        if walk.unconditional and M.covers_all(m):
            t._state.mark_written(view)
        elif writers is not None:
            import torch
            t._state.mark_elements_written(view, torch.from_numpy(writers[walk.target] >= 0))


# -- the CPU executor ----------------------------------------------------------------------------

@dataclass
class _Run:
    grid: tuple
    block: tuple
    threads: int
    consts: dict
    unsafe: bool = False

    def mapping(self, walk):
        return resolved(walk, self.consts)


def _run_on_cpu(kernel, bound) -> None:
    views, args = {}, []
    for p in kernel.params:
        if p.is_tensor:
            t = bound.tensors[p.name].tensor._torch()
            views[p.name] = cpu_executor.View(p.name, t.numpy(), p.kind)
            args.append(views[p.name])
        elif p.kind == CONST:
            args.append(bound.consts[p.name])
        else:
            v = bound.scalars[p.name]
            args.append(np.float32(v) if p.dtype is float else v)
    block = tuple(kernel.contract.block) + (1,) * (3 - len(kernel.contract.block))
    run = _Run(bound.grid, block, kernel.contract.threads, bound.consts, kernel.unsafe)
    cpu_executor.run_kernel(kernel.thread_fn, run, args)
    _mark_written(kernel, bound, {n: v.writer for n, v in views.items() if v.writer is not None})


# -- the GPU ---------------------------------------------------------------------------------------

def _capability(index: int) -> tuple:
    cap = _CAPABILITY.get(index)
    if cap is None:
        import torch
        cap = _CAPABILITY[index] = tuple(torch.cuda.get_device_capability(index))
    return cap


def _run_on_gpu(kernel, bound, device, outputs, plan):
    import torch
    index = device.index if device.index is not None else torch.cuda.current_device()
    if plan.compiled is None:      # the checks and the compile a layout needs once
        C.check_capability(kernel.contract, _capability(index), f"cuda:{index}", None)
        pool = _gpu_shared(kernel, bound, index)
        for name, node in kernel.info.checked:
            if name in bound.tensors and bound.tensors[name].tensor._torch().numel() == 0:
                raise LaunchError(f"`{name}` is empty, but `{kernel.name}` reads it at line "
                                  f"{kernel.src.loc(node).line}", help="launch with a non-empty tensor")
        plan.compiled = kernel.gpu_compiled(bound, index)
        if pool and pool + _static_gpu_bytes(kernel, bound) > C.STATIC_SHARED_LIMIT:    # above 48 KiB: opt in
            gpu_launch.allow_dynamic_shared(plan.compiled, pool, index)
        plan.err = kernel.error_flag(index)
        plan.masks = {name: torch.zeros(bound.tensors[name].shape, dtype=torch.uint8, device=device)
                      for name in written_targets(kernel.info)}
        args, plan.data_at, plan.mask_at = _kernel_args(kernel, bound, plan.err, plan.masks)
        plan.args = gpu_launch.Params(args)       # the layout's: once (each launch fills in its pointers)
        plan.mask_owner = {name: bound.tensors[name].tensor._torch().data_ptr() for name in plan.masks}
        if 0 not in bound.grid:      # an empty output launches nothing (and CUDA takes no empty grid)
            plan.config = gpu_launch.config(bound.grid, kernel.block3, pool)
    else:
        plan.fill_pointers(bound)
        if plan.masks:
            plan.own_masks({name: bound.tensors[name].tensor._torch().data_ptr() for name in plan.masks})
    if index == torch.cuda.current_device():
        future = _start(kernel, bound, outputs, plan, torch.cuda.current_stream(index))
    else:
        with torch.cuda.device(index):
            future = _start(kernel, bound, outputs, plan, torch.cuda.current_stream(index))
    future, marks = future
    if plan.seen_at is not None and plan.repeat is None:     # a keyed layout: later launches take the lean path
        plan.repeat = GpuRepeat(kernel, plan, bound, index)
    return SimtFuture(future, kernel, plan.err if kernel.has_checks else None, marks)


def _static_gpu_bytes(kernel, bound) -> int:
    static = shared_bytes(kernel.info, bound.consts)
    return static + (shared_shadow.static_shadow_bytes(kernel.info, bound.consts) if kernel.sanitize else 0)


def _gpu_shared(kernel, bound, index: int) -> int:
    """The dynamic shared memory (bytes) a GPU launch passes: the array, and with `sanitize=True` its
    shadow bits; checked against this device's per-block limit (LaunchError)."""
    decl = dynamic_shared(kernel.info)
    if decl is None and not (kernel.sanitize and kernel.info.shared):
        return 0
    limit = _shared_limit(index)
    _check_dynamic_shared(kernel, bound, limit, f"a block on cuda:{index}")
    pool = 0 if decl is None else shared_shadow.pool_bytes(decl, bound.scalars[decl.shape[0]]) \
        if kernel.sanitize else dynamic_shared_bytes(kernel.info, bound.scalars)
    static = _static_gpu_bytes(kernel, bound)
    if kernel.sanitize and (static > C.STATIC_SHARED_LIMIT or static + pool > limit):
        raise LaunchError(f"`{kernel.name}` with sanitize=True needs {static + pool} bytes of shared memory (its "
                          f"arrays and a shadow byte per element), more than a block on cuda:{index} can have",
                          help="sanitize a launch with smaller shared arrays, or test the kernel on the CPU")
    return pool


def _shared_limit(index: int) -> int:
    """The most shared memory a block may opt in to on this device."""
    limit = _SHARED_LIMIT.get(index)
    if limit is None:
        import torch
        props = torch.cuda.get_device_properties(index)
        limit = _SHARED_LIMIT[index] = int(getattr(props, "shared_memory_per_block_optin", 0)
                                           or C.STATIC_SHARED_LIMIT)
    return limit


def _kernel_args(kernel, bound, err, masks) -> tuple:
    """The kernel's parameters in numba's ABI: each tensor's fields, each scalar, the error flag,
    an unsafe kernel's write masks; and where each tensor's and each mask's data pointer sits."""
    args: list = []
    data_at = {}
    for p in kernel.params:
        if p.is_tensor:
            data_at[p.name] = len(args) + gpu_launch.DATA_FIELD
            gpu_launch.array_args(bound.tensors[p.name].tensor._torch(), args)
        elif p.kind == SCALAR:
            args.append(gpu_launch.scalar_arg(bound.scalars[p.name], p.dtype))
    gpu_launch.array_args(err, args)
    mask_at = {}
    for name in written_targets(kernel.info):
        mask_at[name] = len(args) + gpu_launch.DATA_FIELD
        gpu_launch.array_args(masks[name], args)
    return args, data_at, mask_at


def _start(kernel, bound, outputs, plan, stream):
    """On `stream`: wait for conflicting work elsewhere (S10), launch, mark (S14), record (S9/S10).
    Returns the runtime's future and the write masks to mark from at sync."""
    sets = ordering.byte_sets(kernel.runtime_view, bound)     # once, for the ordering and the record
    ordering.order_before(kernel.runtime_view, bound, stream, sets=sets)
    marks = []
    if 0 not in bound.grid:
        marks = write_masks.clear(plan.masks, {n: (bound.tensors[n].tensor._torch(), bound.tensors[n].tensor._state)
                                               for n in plan.masks})
        gpu_launch.launch(plan.compiled, plan.config, stream.cuda_stream, plan.args)
    _mark_written(kernel, bound)
    return ordering.record_after(kernel.runtime_view, bound, stream, outputs, sets=sets), marks
