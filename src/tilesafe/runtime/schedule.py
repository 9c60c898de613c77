"""Schedule hints: how a kernel is mapped to the hardware, kept apart from what it computes.

`ts.schedule(num_warps=8, num_stages=3)` is given to a launch (`kernel(..., schedule=s)`),
as a kernel default (`@ts.kernel(schedule=s)`), or chosen by autotuning. It changes the
generated machine code (it is part of the compiled-code key) but never the results. The
reference backend ignores it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import LaunchError


@dataclass(frozen=True, slots=True)
class Schedule:
    num_warps: int | None = None
    num_stages: int | None = None
    maxnreg: int | None = None
    tma: bool | None = None       # TMA tensor descriptors for eligible 2-D accesses; None: the backend picks
    reverse_blocks: tuple = ()    # grid axes whose blocks run last-index first
    pdl: bool = False             # programmatic dependent launch (Hopper+): see `schedule`
    waves_per_eu: int | None = None   # AMD only: wavefronts per execution unit to aim for
    # Not a hint: the ts.Ref arguments of this launch in frozen memory (runtime/freeze.py), whose
    # leading loads may precede the PDL wait. Set by the runtime per launch, never by `schedule`.
    early: frozenset = frozenset()

    def options(self) -> dict:
        """Triton launch options (only the hints that were set; `tma` and `reverse_blocks` are
        ours, not Triton's; `pdl` becomes Triton's `launch_pdl` where the GPU has it)."""
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages),
                                  ("maxnreg", self.maxnreg), ("waves_per_eu", self.waves_per_eu)) if v is not None}

    def hints(self) -> dict:
        """Every hint that was set, as `ts.schedule(**hints)` takes them (JSON values)."""
        out = self.options()
        if self.tma is not None:
            out["tma"] = self.tma
        if self.reverse_blocks:
            out["reverse_blocks"] = list(self.reverse_blocks)
        if self.pdl:
            out["pdl"] = True
        return out


def schedule(num_warps: int | None = None, num_stages: int | None = None, maxnreg: int | None = None,
             tma: bool | None = None, reverse_blocks=(), pdl: bool = False,
             waves_per_eu: int | None = None) -> Schedule:
    """Schedule hints for a launch: `kernel(*args, schedule=ts.schedule(num_warps=8))`.

    `tma=True/False` forces TMA tensor descriptors on or off for the 2-D accesses that can
    use them (aligned base and row stride, contiguous rows); by default (None) the `triton`
    backend uses them on Hopper and newer GPUs for kernels that multiply tiles (`ts.mma`).
    `reverse_blocks=(1,)` numbers the blocks of grid axis 1 from the far end: block_id(1)
    is `num_blocks(1) - 1 - i` for the i-th block the GPU starts. Each block still owns one
    tile, so results do not change; a kernel whose later blocks do more work (causal
    attention) starts those first and leaves no long block for the end.
    `pdl=True` (programmatic dependent launch, Hopper and newer): the kernel may start
    launching while the kernel before it on the stream still runs, and lets the next one do
    the same; it waits for the one before to finish, its writes visible, before its first
    memory access, so results and ordering are those of a plain launch. It saves the gap
    between two short kernels (a split computation and its combination); on a GPU without it
    (AMD) the launch is plain, and `kernel.checks(..., target=)` notes that.
    `num_warps` counts the target's warps: 32 threads on NVIDIA, a wavefront of 64 on AMD.
    `waves_per_eu=n` (AMD only) asks the compiler to fit n wavefronts per SIMD unit, trading
    registers for occupancy. Hints a GPU has no hardware for (`tma=True`, `maxnreg` on AMD,
    `waves_per_eu` on NVIDIA) are a LaunchError naming the target."""
    if num_warps is not None and (not isinstance(num_warps, int) or num_warps not in (1, 2, 4, 8, 16, 32)):
        raise LaunchError(f"num_warps={num_warps!r} must be a power of two from 1 to 32")
    if num_stages is not None and (not isinstance(num_stages, int) or num_stages < 1):
        raise LaunchError(f"num_stages={num_stages!r} must be an int >= 1")
    if maxnreg is not None and (not isinstance(maxnreg, int) or maxnreg < 16):
        raise LaunchError(f"maxnreg={maxnreg!r} must be an int >= 16")
    if tma is not None and not isinstance(tma, bool):
        raise LaunchError(f"tma={tma!r} must be True, False or None")
    axes = tuple(reverse_blocks) if isinstance(reverse_blocks, (tuple, list)) else None
    if axes is None or any(not isinstance(a, int) or isinstance(a, bool) or a not in (0, 1, 2) for a in axes):
        raise LaunchError(f"reverse_blocks={reverse_blocks!r} must be a tuple of grid axes (0, 1 or 2)")
    if not isinstance(pdl, bool):
        raise LaunchError(f"pdl={pdl!r} must be True or False")
    if waves_per_eu is not None and (not isinstance(waves_per_eu, int) or isinstance(waves_per_eu, bool)
                                     or not 0 <= waves_per_eu <= 8):
        raise LaunchError(f"waves_per_eu={waves_per_eu!r} must be an int from 0 (the compiler's choice) to 8")
    return Schedule(num_warps, num_stages, maxnreg, tma, tuple(sorted(set(axes))), pdl, waves_per_eu)


def with_pdl(s: Schedule | None) -> Schedule:
    """`s` with programmatic dependent launch on (`ts.pdl()`, `ts.graph(pdl=True)`, TILESAFE_PDL)."""
    if s is None:
        return _PDL
    return s if s.pdl else replace(s, pdl=True)


_PDL = Schedule(pdl=True)


def take(kwargs: dict, default: Schedule | None) -> tuple[dict, Schedule | None]:
    """Split a launch's `schedule=` keyword from the kernel's own arguments."""
    if "schedule" not in kwargs:
        return kwargs, default
    kwargs = dict(kwargs)
    s = kwargs.pop("schedule")
    if s is not None and not isinstance(s, Schedule):
        raise LaunchError(f"schedule= takes ts.schedule(...), got {type(s).__name__}",
                          help="schedule=ts.schedule(num_warps=8, num_stages=3)")
    return kwargs, s if s is not None else default
