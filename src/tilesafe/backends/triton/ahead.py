"""Ahead-of-time compiles for a GPU target, on any machine (no GPU, no memory traffic).

The runtime binds the arguments (`ts.spec`s or tensors) and specializes them as a launch
would (runtime/compile_ahead.py); here the specialization becomes Triton source for that
target — TMA descriptors where the target has them and the policy takes them — and is
handed to `triton.compile`. Pointers are taken as 16-byte aligned.
"""
from __future__ import annotations

import math

from ...errors import LaunchError
from ...lang.coverage import loaded_outputs
from ...lang.ir import walk
from ...settings import SETTINGS
from . import adapter, codegen, targets, tma
from .compile_errors import compile_error


def resolve_target(target: str, arch: int | None, schedule):
    """The target ("sm_90", "gfx942", ...; `arch=90` spells "sm_90"); a hint it lacks, forced, is refused."""
    target = targets.resolve(f"sm_{arch}" if arch is not None else target)
    targets.check_schedule(target, schedule)
    return target


def compile_spec(kernel, spec, masks, wide: bool, bound, target, descriptors: bool | None, schedule):
    """Triton's compiled kernel (`.asm["ptx"]` or `.asm["amdgcn"]`, ...) of one specialization.
    `descriptors`: force TMA on or off; None chooses as a launch on that GPU would."""
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
    gen = codegen.generate(kernel, spec, masks, wide, rows, column_major=cols,
                           reversed_axes=schedule.reverse_blocks if schedule is not None else (), pdl=pdl,
                           early=schedule.early if pdl else frozenset())
    values = [_value(slot, bound) for slot in gen.args]
    try:
        compiled = adapter.compile_for(gen, values, SETTINGS.cache_dir, target.gpu_target(),
                                       **targets.triton_options(target, schedule))
    except Exception as e:
        if (failed := compile_error(kernel, e)) is None:
            raise
        raise failed from None
    _check_shared_memory(kernel, compiled, target)
    return compiled


def _value(slot, bound):
    """What Triton specializes one argument on (as backend.launch_values, from the bound facts):
    ints for extents, strides, numels and scalars; None for pointers (taken as aligned) and counters."""
    f = bound.tensors.get(slot.param)
    if slot.what in ("ptr", "arrivals"):
        return None
    if slot.what == "extent":
        return f.shape[slot.axis]
    if slot.what == "stride":
        return f.strides[slot.axis]
    if slot.what == "numel":
        return math.prod(f.shape)
    return bound.scalars.get(slot.param)


def _check_shared_memory(kernel, compiled, target) -> None:
    """Triton compiles a pipeline deeper than the target's shared memory (LDS) without a word;
    the launch would then fail on that GPU. Refuse it here, where the target is known."""
    used = getattr(compiled.metadata, "shared", 0) or 0
    if used > target.shared_bytes:
        raise LaunchError(f"`{kernel.name}` needs {used // 1024} KiB of shared memory per block on {target.name}, "
                          f"which has {target.shared_bytes // 1024} KiB",
                          help="use fewer pipeline stages (num_stages) or smaller tiles for this target")

