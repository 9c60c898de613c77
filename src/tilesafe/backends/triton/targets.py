"""Compile targets: the GPUs the Triton backend can compile for, with or without that GPU.

A target is named as its compiler names it: `"sm_90"` (Hopper), `"sm_100"` (Blackwell),
`"gfx942"` (AMD CDNA3: MI300X), `"gfx950"` (CDNA4: MI355X). It decides what the kernel's
semantics never depend on:
  * the warp width — 32 threads on NVIDIA, a wavefront of 64 on AMD; Triton's `num_warps`
    counts warps of that width, so the library's configs halve it on AMD to keep the
    threads of a block (`configs`);
  * which schedule hints apply (`check_schedule`). NVIDIA-only hardware: TMA tensor
    descriptors, programmatic dependent launch (`pdl`), a register cap (`maxnreg`); AMD-only:
    `waves_per_eu` (an occupancy hint). A hint the target lacks is refused when it was
    forced (`tma=True`, `maxnreg=`, `waves_per_eu=`); `pdl` is documented as optional, so it
    is dropped with a note (`notes`), and `tma=None` picks pointers where there is no TMA;
  * the machine it is sized for (`units`: SMs or CUs of the reference GPU), for the configs
    that count blocks per SM.
The safety checks never look at the target: they are decided on the IR, so the refusals and
the bounds report are the same for every target (tests/triton/test_amd_compile.py).
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

from ...errors import LaunchError


@dataclass(frozen=True, slots=True)
class Target:
    name: str            # "sm_90", "gfx942"
    backend: str         # Triton's backend name: "cuda" or "hip"
    arch: int | str      # Triton's GPUTarget arch: 90, "gfx942"
    warp_size: int       # threads per warp (NVIDIA) or wavefront (AMD)
    assembly: str        # the key of the compiled kernel's assembly in `.asm`: "ptx", "amdgcn"
    gpu: str             # the reference GPU the defaults are sized for
    units: int           # its SMs (NVIDIA) or CUs (AMD)
    shared_bytes: int    # shared memory (LDS on AMD) one block may use
    tma: bool = False    # tensor memory accelerator (tensor descriptors)
    pdl: bool = False    # programmatic dependent launch

    @property
    def amd(self) -> bool:
        return self.backend == "hip"

    def gpu_target(self):
        """Triton's `GPUTarget` for this target."""
        from triton.backends.compiler import GPUTarget
        return GPUTarget(self.backend, self.arch, self.warp_size)


# Shared memory per block (the opt-in maximum): 163 KiB on Ampere, 227 KiB on Hopper and
# Blackwell; LDS is 64 KiB per workgroup on CDNA3 and 160 KiB on CDNA4.
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sm_80", "cuda", 80, 32, "ptx", "nvidia-a100", 108, 166912),
    Target("sm_90", "cuda", 90, 32, "ptx", "nvidia-h200", 132, 232448, tma=True, pdl=True),
    Target("sm_100", "cuda", 100, 32, "ptx", "nvidia-b200", 148, 232448, tma=True, pdl=True),
    Target("gfx942", "hip", "gfx942", 64, "amdgcn", "amd-instinct-mi300x", 304, 65536),
    Target("gfx950", "hip", "gfx950", 64, "amdgcn", "amd-instinct-mi355x", 256, 163840),
)}

# Hints a target without the hardware refuses when forced, and the hardware they need.
_NVIDIA_ONLY = {"tma": "TMA tensor descriptors", "maxnreg": "a per-thread register cap"}
_AMD_ONLY = {"waves_per_eu": "an occupancy hint per execution unit"}


def resolve(target) -> Target:
    """The Target named `target` ("gfx942", "sm_90"; a Target passes through)."""
    if isinstance(target, Target):
        return target
    found = TARGETS.get(target) if isinstance(target, str) else None
    if found is None:
        raise LaunchError(f"unknown compile target {target!r}",
                          help=f"use one of {', '.join(TARGETS)}")
    return found


def check_schedule(target: Target, schedule) -> None:
    """Refuse a forced hint `target` has no hardware for (a LaunchError naming both)."""
    if schedule is None:
        return
    set_hints = schedule.hints()
    if set_hints.get("tma") is True and not target.tma:
        _refuse(target, "tma=True", _NVIDIA_ONLY["tma"], "leave tma unset (None): pointers are used")
    if "maxnreg" in set_hints and target.amd:
        _refuse(target, f"maxnreg={set_hints['maxnreg']}", _NVIDIA_ONLY["maxnreg"],
                "use waves_per_eu= to trade registers for occupancy on AMD")
    if "waves_per_eu" in set_hints and not target.amd:
        _refuse(target, f"waves_per_eu={set_hints['waves_per_eu']}", _AMD_ONLY["waves_per_eu"],
                "use maxnreg= to cap registers on NVIDIA")


def _refuse(target: Target, option: str, needs: str, help: str):
    raise LaunchError(f"schedule hint {option} does not apply to target {target.name}: it needs {needs}, "
                      f"which {target.name} does not have", help=help)


def notes(target: Target, schedule, multiplies: bool) -> tuple[str, ...]:
    """What a compile for `target` leaves out of `schedule`, said once per hint; `multiplies`:
    the kernel uses `ts.mma`, so Hopper would feed it through TMA by default."""
    out = []
    if schedule is not None and schedule.pdl and not target.pdl:
        out.append(f"pdl=True ignored on {target.name}: no programmatic dependent launch, the launch is plain "
                   "(it waits for the kernel before it, as any launch does)")
    if multiplies and (schedule is None or schedule.tma is None) and not target.tma:
        out.append(f"tma: {target.name} has no TMA; accesses use pointers")
    return tuple(out)


def triton_options(target: Target, schedule) -> dict:
    """Triton compile options for `schedule` on `target` (the caller ran `check_schedule`:
    ahead.resolve_target does, before anything is bound)."""
    if schedule is None:
        return {}
    options = schedule.options()
    if schedule.pdl and target.pdl:
        options["launch_pdl"] = True
    return options


# The target a compile-ahead is for, seen by the library's config lookup (configs.py), so
# `kernel.compile(..., target=)` of a library call takes that target's configs. Outside
# such a compile, the target is the current GPU's (`device_target`).
_compiling_for: contextvars.ContextVar[Target | None] = contextvars.ContextVar("tilesafe_compile_target",
                                                                                default=None)
compile_target_var = _compiling_for     # read directly where every library call asks (call_plans.call_key)


@contextlib.contextmanager
def compiling_for(target):
    """Within the block, the library picks configs for `target` (a name or a Target)."""
    token = _compiling_for.set(resolve(target))
    try:
        yield
    finally:
        _compiling_for.reset(token)


def compile_target() -> Target | None:
    """The target set by `compiling_for`, else None."""
    return _compiling_for.get()


def device_target(index: int | None = None) -> Target | None:
    """The target of GPU `index` (default: the current one) when it is one we know (NVIDIA or
    ROCm torch), else None."""
    import torch
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
    if getattr(torch.version, "hip", None):
        return TARGETS.get(str(getattr(props, "gcnArchName", "")).split(":")[0])
    return TARGETS.get(f"sm_{props.major}{props.minor}")
