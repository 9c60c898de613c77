"""Launching one library kernel: partition its outputs, launch, give the outputs back.

The partitions are always ended, also when the launch is refused, so a failed call never
leaves a caller's `out=` tensor lent. The launch is not waited for: later host
reads and launches are ordered after it by the runtime (S9/S10).
"""
from __future__ import annotations

import dataclasses
import functools

from ..runtime.host_lock import LOCK
from ..runtime.partition import end_step, partition_for_step
from ..runtime.schedule import Schedule, schedule
from ..runtime.tensor import Tensor
from ..settings import current_backend
from .call_recording import ACTIVE


def launch(kernel, outputs: dict[str, tuple[Tensor, tuple]], grid=None, *, cfg: dict | None, pdl: bool = False,
           **args) -> None:
    """`kernel(**{name: view.partition(tile)}, **args)`; `grid` only for persistent kernels;
    `cfg`, the config the tiles came from, also gives the launch's schedule hints (required:
    None only for the small kernels that finish a split computation on Triton's defaults);
    `pdl` launches it with programmatic dependent launch (the kernels of a split computation)."""
    if (rec := ACTIVE.get()) is not None:     # a call plan launches it again (call_recording)
        rec.launched(kernel, outputs, grid, cfg, pdl, args)
    if cfg is not None or pdl:
        args["schedule"] = schedule_with(cfg, pdl)
    start(kernel, outputs, grid, args)


def schedule_with(cfg: dict | None, pdl: bool) -> Schedule | None:
    """The schedule of a launch: its config's hints, and `pdl`."""
    return _with_pdl(schedule_of(cfg or {}), pdl)


def start(kernel, outputs: dict, grid, args: dict, step=None) -> None:
    """Partition the outputs, launch, give the outputs back. `step` (a call plan's launch)
    keeps the launch cache's entry for its layout: its next launches use it directly."""
    parts = {}
    # The partitions live only inside this locked step (host_lock): no other thread sees the
    # outputs lent, so the lending needs no record (partition_for_step). Bytes some other
    # partition holds are refused as `view.partition(tile)` would refuse them.
    with LOCK:
        try:
            for name, (view, tile) in outputs.items():
                view._check_lendable("partition()")
                parts[name] = partition_for_step(view, tuple(tile))
            kwargs = {**parts, **args}
            if step is not None and step.entry is not None:
                kernel.launch_entry(step.entry, kwargs, grid)
            elif grid is None:
                kernel(**kwargs)
            else:
                kernel.launch(**kwargs, grid=grid)
            if step is not None and step.entry is None:
                step.entry = kernel.cached_entry(kwargs, grid)
        finally:
            for p in parts.values():
                end_step(p)


def schedule_of(cfg: dict) -> Schedule | None:
    """The schedule hints of a config (`num_warps`, `num_stages`, `tma`, `reverse_blocks`,
    `waves_per_eu`), None when it has none."""
    hints = tuple((k, tuple(v) if isinstance(v, list) else v)   # a JSON table gives lists: hashable here
                  for k in ("num_warps", "num_stages", "tma", "reverse_blocks", "waves_per_eu")
                  if (v := cfg.get(k)) is not None)
    return _schedule(hints) if hints else None


@functools.lru_cache(maxsize=256)
def _with_pdl(s: Schedule | None, pdl: bool) -> Schedule | None:
    if not pdl:
        return s
    return dataclasses.replace(s, pdl=True) if s is not None else schedule(pdl=True)


@functools.lru_cache(maxsize=256)
def _schedule(hints: tuple) -> Schedule:
    """One validated `ts.schedule` per distinct set of hints (every library call asks)."""
    return schedule(**dict(hints))


REFERENCE_WORKERS = 3                # blocks running at once on CPU backends (the backends' default)


def workers(device) -> int:
    """Blocks a GPU runs at once for a persistent or chunked launch: its SMs; on the CPU
    backends, their persistent grid."""
    from ..backends.triton import targets
    target = targets.compile_target()
    if target is not None:            # compiling ahead for a GPU that is not here: its SMs / CUs
        return target.units
    if current_backend() == "triton" and str(device).startswith("cuda"):
        import torch
        return torch.cuda.get_device_properties(torch.device(str(device))).multi_processor_count
    return REFERENCE_WORKERS


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1
