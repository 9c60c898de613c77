"""`compile_ahead`: compile a kernel for a GPU target through Triton, without that GPU.

The arguments are bound and specialized exactly as a launch would (S6, the preconditions'
dims, bounds masks, deny_kernel_checks), then the Triton backend compiles that
specialization for the target (backends/triton/ahead.py). `kernel.compile(..., target=)`
and `tilesafe check --target` run on it.
"""
from __future__ import annotations

from ..backends.triton import ahead
from ..lang import bounds
from . import binding
from .specialize import LaunchFacts, needs_64bit, refuse_denied_masks


def compile_ahead(kernel, *args, target="sm_90", arch: int | None = None, descriptors: bool | None = False, grid=None,
                  schedule=None, **kwargs):
    """`triton.compile` a kernel for a GPU `target` ("sm_90", "sm_100", "gfx942", "gfx950";
    `arch=90` is the older spelling of "sm_90") from `ts.spec`s or tensors, without a GPU;
    returns Triton's compiled kernel (`.asm["ptx"]` or `.asm["amdgcn"]`, `.asm["ttgir"]`, ...).
    Pointers are taken as 16-byte aligned; with `descriptors`, eligible tensors use TMA
    (None: as a launch on that GPU would choose, from `schedule.tma` and the kernel). A hint
    the target lacks is a LaunchError when forced (`targets.check_schedule`)."""
    target = ahead.resolve_target(target, arch, schedule)
    bound = binding.bind(kernel, args, kwargs, grid, kernel.unsafe)
    kernel._check_preconditions(bound)   # refused as a launch would refuse it
    spec = kernel.specializer.spec(bound)
    masks = bounds.masks_for(spec.checks, LaunchFacts(bound))
    if kernel.deny_kernel_checks:   # refused as a launch would refuse it, whatever the target
        refuse_denied_masks(kernel, spec, masks)
    return ahead.compile_spec(kernel, spec, masks, needs_64bit(bound), bound, target, descriptors, schedule)
