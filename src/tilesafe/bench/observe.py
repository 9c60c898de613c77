"""What a tilesafe library call launched: which kernels, with which tiles and schedule hints.

The raw Triton twins mirror the tilesafe launch they are compared with, so they read its
tiling here instead of re-deriving it from the config table (a re-derivation could drift
from the library's own clamps). A kernel keeps its last launch plan, whose bound
arguments hold the compile-time constants (tile sizes, `BK`, `GROUP`, ...) and the grid,
and whose compiled code holds the Triton options (`num_warps`, `num_stages`) it ran with
and which tensors it addressed through TMA descriptors.
The library wraps every argument in a fresh view, so each call makes a new plan: a plan
that changed across the call is a launch of that call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    kernel: str
    consts: dict                        # name -> int / bool (dtypes left out)
    grid: tuple[int, ...] | None        # None for persistent kernels (the backend picks it)
    options: dict = field(default_factory=dict)   # Triton launch options; {} = Triton's defaults
    tma: dict = field(default_factory=dict)       # tensor -> "rows" / "columns": accessed through TMA
    scalars: dict = field(default_factory=dict)   # runtime scalar arguments (e.g. split-K's PER)
    reversed_axes: tuple = ()                     # grid axes whose blocks ran last-index first

    def tile_elems(self, *names: str) -> int:
        return math.prod(self.consts[n] for n in names)

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "consts": self.consts, "grid": list(self.grid) if self.grid else None,
                "options": self.options, "tma": self.tma, "scalars": self.scalars,
                "reversed_axes": list(self.reversed_axes)}


class Observer:
    """`with Observer(kernels) as seen: tk.matmul(...)`; then `seen["mm_kernel"]` is a LaunchFacts."""

    def __init__(self, kernels):
        self.kernels = tuple(kernels)
        self.seen: dict[str, LaunchFacts] = {}
        self._before: dict = {}

    def __enter__(self) -> dict[str, LaunchFacts]:
        # Cleared, not compared by identity: a layout's GPU fast path hands back the same
        # Launched record every launch (planned_launch, launch_cache), so only "set again" tells.
        self._before = {k.name: getattr(k, "last_launch", None) for k in self.kernels}
        for k in self.kernels:
            k.last_launch = None
        return self.seen

    def __exit__(self, *exc) -> None:
        for k in self.kernels:
            plan = getattr(k, "last_launch", None)   # set by every launch (runtime/launch_cache.Launched)
            if plan is None:
                k.last_launch = self._before[k.name]
            elif exc[0] is None:
                self.seen[k.name] = facts(k.name, plan)


def facts(name: str, plan) -> LaunchFacts:
    consts = {k: v for k, v in plan.bound.consts.items() if isinstance(v, (bool, int))}
    grid = tuple(plan.bound.grid) if plan.bound.grid else None
    gen = getattr(plan.compiled, "last_generated", None)
    tma = {n: "columns" if n in gen.column_major else "rows" for n in gen.descriptors} if gen is not None else {}
    scalars = {k: v for k, v in plan.bound.scalars.items() if isinstance(v, (bool, int, float))}
    return LaunchFacts(name, consts, grid, dict(getattr(plan.compiled, "options", {}) or {}), tma, scalars,
                       tuple(getattr(plan.compiled, "reversed_axes", ())))
