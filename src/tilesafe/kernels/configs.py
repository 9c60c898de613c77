"""Tile sizes for the library's kernels: a small table per kernel family, and `tune`.

A config is a plain dict (tile sizes, plus the schedule hints `num_warps` / `num_stages`).
It is looked up by a *shape class*: the family, the dtype and bucketed sizes (the next
power of two, clamped), so one entry serves a whole range of shapes and a decode step does
not change class per token. GEMMs look up a *weight class* first, with N and K exact and
M bucketed (`weight_class`): a model's projection shapes are fixed, and neighbours in one
bucket (2560 and 4096 wide) want different tiles. Where the config comes from, in order:

1. `config=` passed to the call (tests, benchmarks and `tune` use it);
2. on a GPU, the tuned table `tuned/<gpu>.json` for that shape class, written by `tune`
   and committed so a fresh machine need not retune;
3. the defaults below: GPU defaults for the `triton` backend, small CPU defaults for the
   reference interpreter and Triton's interpreter (small tiles keep CPU tests fast while
   still covering several blocks and ragged edges).

The GPU defaults are per compile target (`gpu_defaults`): the table below is the H200's
(sm_90); other targets scale the counts of blocks per SM to their SMs or CUs, drop the
hints they lack (TMA), and on AMD count `num_warps` in wavefronts of 64 (half as many, so a
block keeps its threads and each thread its share of a tile) and take `AMD_DEFAULTS`. The
target is the GPU at hand, or the one a compile-ahead is for (`targets.compiling_for`).

The schedule hints in a config (`num_warps`, `num_stages`, and `tma`: TMA tensor
descriptors on/off, None for the backend's choice) go to the launch as a `ts.schedule`
(`launch.schedule_of`); they change the machine code, never the results.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from ..backends.triton import targets
from ..errors import LaunchError, caller_loc
from ..settings import current_backend
from . import call_recording, config_model, first_use
from .machine_model import Attention, Decode, Gemm   # noqa: F401 - the shapes `lookup(shape=)` takes

TUNED_DIR = Path(__file__).parent / "tuned"

# family -> defaults. Keys are the same on both sides; GPU values assume 4 warps.
CPU_DEFAULTS: dict[str, dict] = {
    "elementwise": {"block": 256},
    "reduce": {"block_m": 2, "block_n": 32},
    "rows": {"block_m": 2, "row_elems": 256, "row_max": 1024, "sub": 64, "max_chunks": 4, "target_blocks": 6,
             "reverse_pass": True},
    "matmul": {"block_m": 32, "block_n": 32, "block_k": 32, "group": 8, "persistent": None, "split_k": 1,
               "min_blocks": 1, "tail_split": False, "one_kernel": False, "weight_major": False},
    "linear": {"block_m": 16, "block_n": 32, "block_k": 32, "min_blocks": 1, "split_k": None, "prefetch": False,
               "one_kernel": False, "weight_major": False},
    "bmm": {"block_m": 32, "block_n": 32, "block_k": 32, "group": 8, "persistent": None},
    "attention": {"block_m": 16, "block_n": 16, "flat": True},
    "decode": {"block_n": 16, "splits": 3, "target_blocks": 8, "flat": True, "one_kernel": True},
    "rope": {"block_t": 2, "block_h": 2},
    "embedding": {"block_t": 2, "block_d": 32},
    "argmax": {"block_m": 2, "block_n": 32, "chunk": 64},
}
GPU_DEFAULTS: dict[str, dict] = {
    "elementwise": {"block": 2048, "num_warps": 4},
    "reduce": {"block_m": 4, "block_n": 1024, "num_warps": 4},
    "rows": {"block_m": 16, "row_elems": 4096, "row_max": 16384, "sub": 2048, "max_chunks": 64,
             "target_blocks": 1056, "reverse_pass": True, "num_warps": 4},
    # one_kernel: a split-K product's last split of each output tile adds the splits up (S16)
    # instead of a second kernel (matmul._split_k)
    "matmul": {"block_m": 128, "block_n": 128, "block_k": 64, "group": 8, "persistent": None, "split_k": 1,
               "min_blocks": 132, "tail_split": False, "one_kernel": False, "weight_major": False, "num_warps": 8,
               "num_stages": 3},
    # tma False: the 2..16-row tensor-core path loads through pointers, 5-20% faster than TMA
    # on 10 of 11 weights in both H200 tuner runs of M = 16 (tune-candidates-linear-attention,
    # -m16-m128-m2048: e.g. 6144 x 2560 10.8 against 13.1 us); one row (FMAs) is the same either way
    "linear": {"block_m": 16, "block_n": 32, "block_k": 256, "min_blocks": 264, "split_k": None, "prefetch": False,
               "one_kernel": False, "weight_major": False, "num_warps": 4, "num_stages": 4, "tma": False},
    # persistent through rank-3 TMA descriptors: 0.95-1.02 of cuBLAS on the H200, where
    # either alone was slower than one tile per block on pointers (tune-bmm.log)
    "bmm": {"block_m": 128, "block_n": 128, "block_k": 64, "group": 8, "persistent": None, "tma": True,
            "num_warps": 4, "num_stages": 5},
    "attention": {"block_m": 64, "block_n": 64, "flat": True, "num_warps": 4, "num_stages": 3},
    "decode": {"block_n": 64, "splits": None, "target_blocks": 264, "flat": True, "one_kernel": False,
               "num_warps": 4, "num_stages": 3},
    "rope": {"block_t": 4, "block_h": 8, "num_warps": 4},
    "embedding": {"block_t": 4, "block_d": 1024, "num_warps": 4},
    "argmax": {"block_m": 1, "block_n": 1024, "chunk": 8192, "num_warps": 4},
}
# fp32 tiles hold twice the bytes of bf16 ones: halve the K tile of the GEMMs.
GPU_F32 = {"matmul": {"block_k": 32}, "bmm": {"block_k": 32}, "linear": {"block_k": 128}}
H200_SMS = 132                                   # what GPU_DEFAULTS' block counts are sized for
PER_SM_KEYS = ("min_blocks", "target_blocks")    # counts of blocks that scale with the SMs / CUs
# AMD (CDNA3/4): a workgroup has 64 KiB of LDS on gfx942, so the GEMM-like kernels keep
# two pipeline stages (Triton's AMD stream pipeliner), and the matrix-core kernels ask for
# two waves per SIMD (the usual starting point of AMD's Triton tuning guide). Starting
# points, not measured: no AMD GPU has run them (docs/portability.md says what to measure).
AMD_DEFAULTS: dict[str, dict] = {
    "matmul": {"num_stages": 2, "waves_per_eu": 2},
    "linear": {"num_stages": 2},
    "bmm": {"num_stages": 2, "waves_per_eu": 2},
    "attention": {"num_stages": 2, "waves_per_eu": 2},
    "decode": {"num_stages": 2},
}

# Sizes a config may override: positive ints, or None too for the split counts (None: chosen
# from the shape). Checked on `config=` only; the tables are written by `tune`.
POSITIVE_KEYS = frozenset({"block", "block_m", "block_n", "block_k", "block_t", "block_h", "block_d", "row_elems",
                           "row_max", "sub", "chunk", "group", "min_blocks", "target_blocks",
                           "max_chunks"})
COUNT_KEYS = frozenset({"split_k", "splits"})
# Switches a config may override: True or False (persistent also None: chosen from the shape).
BOOL_KEYS = frozenset({"persistent", "tail_split", "prefetch", "reverse_pass", "flat", "one_kernel", "weight_major"})

CPU_BACKENDS = ("reference", "triton-interpreter")
SCHEDULE_KEYS = frozenset({"num_warps", "num_stages", "tma", "waves_per_eu"})   # valid in every family's config


def bucket(n: int, lo: int = 16, hi: int = 1 << 16) -> int:
    """The power of two at or above `n`, clamped to [lo, hi]: a size's shape class."""
    p = 1 << max(0, int(n) - 1).bit_length()
    return max(lo, min(hi, p))


def shape_class(dtype, *sizes: int) -> str:
    """`"bf16/4096/128"`: the key of a tuned entry (also the JSON key)."""
    return "/".join([getattr(dtype, "name", str(dtype)), *(str(bucket(n)) for n in sizes)])


def weight_class(dtype, rows: tuple[int, ...], weight: tuple[int, ...]) -> str:
    """`"bf16/128/2560x4096"`: a product's class with its weight's sizes exact and the rest
    bucketed. A model's projections have fixed weight shapes, so the tuned table can hold
    one entry per projection (tried before the bucketed class, which stays the fallback)."""
    return "/".join([shape_class(dtype, *rows), "x".join(str(int(n)) for n in weight)])


def lookup(family: str, key, override: dict | None = None, dtype=None, shape=None, run=None) -> dict:
    """The config for `family` at shape class `key` on the current backend; `key` may be
    a tuple of shape classes, most specific first (the first one tuned is used).

    With `shape` (a `config_model` shape), on an NVIDIA GPU a tuned entry is used only when
    it was made for this very shape, and any other shape gets the config model's choice
    instead of the bucketed defaults; with `run` too (`run(config)` makes the call with
    that config), inside `first_use_tuning()` the model's best few are timed once."""
    if family not in CPU_DEFAULTS:
        raise LaunchError(f"no kernel family {family!r}", loc=caller_loc(),
                          help=f"one of {', '.join(CPU_DEFAULTS)}")
    if current_backend() in CPU_BACKENDS:
        cfg = dict(CPU_DEFAULTS[family])
    else:
        target = targets.compile_target()
        device = target or _device_target()
        cfg = gpu_defaults(family, device, dtype)
        gpu = target.gpu if target is not None else gpu_name()
        entries = tuned_table(gpu).get(family, {})
        keys = key if isinstance(key, tuple) else (key,)
        if override and POSITIVE_KEYS & set(override):
            # Tiles chosen by the caller: the family's defaults around them, not a tuned or modelled
            # config whose pipeline depth was sized for other tiles (it can overflow shared memory).
            tuned = {}
        elif shape is not None and not (device is not None and device.amd):
            tuned = _modelled(family, keys, shape, entries, target, cfg, gpu, run if override is None else None)
        else:
            tuned = next((entries[k] for k in keys if k in entries), {})
        cfg.update({k: v for k, v in tuned.items() if k != "time_ms"})
    if override:
        unknown = set(override) - set(cfg) - SCHEDULE_KEYS
        if unknown:
            raise LaunchError(f"config keys {sorted(unknown)} are not used by {family} kernels",
                              loc=caller_loc(), help=f"known keys: {', '.join(sorted(cfg))}")
        for k, v in override.items():
            if (k in POSITIVE_KEYS or k in COUNT_KEYS and v is not None) and not _positive_int(v):
                raise LaunchError(f"config {k}={v!r} is not a positive int", loc=caller_loc(),
                                  help="tile sizes and counts are positive ints" +
                                       (" (or None: chosen from the shape)" if k in COUNT_KEYS else ""))
            if k in BOOL_KEYS and not isinstance(v, bool) and not (k == "persistent" and v is None):
                raise LaunchError(f"config {k}={v!r} is not True or False", loc=caller_loc(),
                                  help="switches are bools" + (" (or None: chosen from the shape)"
                                                               if k == "persistent" else ""))
        cfg.update(override)
    return cfg


def _modelled(family, keys, shape, entries, target, defaults, gpu, run) -> dict:
    """A tuned entry made for `shape`, else the config model's choice (timed against the
    model's next best on first use, where asked: first_use.py)."""
    tuned = config_model.refinement(keys, shape, entries)
    if tuned is not None:
        return tuned
    chosen = first_use.remembered(gpu, family, keys[0])
    if chosen is not None:          # tuned in this process: also inside a graph capture, where none times
        return chosen
    machine = config_model.gpu_of(target)
    if run is None or not first_use.wanted():
        return config_model.choice(shape, machine)
    ranked = [dict(defaults, **c) for c in config_model.ranked(shape, first_use.CANDIDATES, machine)]
    if (rec := call_recording.ACTIVE.get()) is not None:
        rec.spoiled = True    # the timed runs are no part of the call a plan would redo (call_plans)
    return first_use.pick(family, keys[0], ranked, run, gpu)


def tuned_entry(family: str, key: str) -> dict | None:
    """The tuned table's own entry `key` of `family` (without its time) for the GPU at hand, or
    the one a compile-ahead is for; None on the CPU backends and where the table has none. For
    entries that refine another lookup's config where measured, and that no bucket or model
    stands in for elsewhere (the fused decode GEMVs': linear_fusions.fused_config)."""
    if current_backend() in CPU_BACKENDS:
        return None
    target = targets.compile_target()
    entry = tuned_table(target.gpu if target is not None else gpu_name()).get(family, {}).get(key)
    return None if entry is None else {k: v for k, v in entry.items() if k != "time_ms"}


def gpu_defaults(family: str, target, dtype=None) -> dict:
    """The GPU defaults of `family` for compile target `target` (None: the H200's table)."""
    cfg = dict(GPU_DEFAULTS[family])
    if getattr(dtype, "name", None) == "f32":
        cfg.update(GPU_F32.get(family, {}))
    if target is None or target.name == "sm_90":
        return cfg
    for k in PER_SM_KEYS:
        if k in cfg:
            cfg[k] = max(1, round(cfg[k] * target.units / H200_SMS))
    if not target.tma:
        cfg.pop("tma", None)          # the backend's choice there: pointers
    if target.amd:
        cfg["num_warps"] = max(1, cfg["num_warps"] * 32 // target.warp_size)
        cfg.update(AMD_DEFAULTS.get(family, {}))
    return cfg


def tma_descriptors() -> bool:
    """Whether a library launch here may force TMA descriptors (`tma=True`): the Triton
    backend, for a target that has them (the compile-ahead target, else the GPU at hand, else
    the H200's, as `gpu_defaults` assumes)."""
    if current_backend() in CPU_BACKENDS:
        return False
    target = targets.compile_target() or _device_target()
    return target is None or target.tma


def _device_target():
    """The current GPU's compile target (None when unknown or no GPU: the H200's table)."""
    import torch
    if not torch.cuda.is_available():
        return None
    return _target_of(torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _target_of(index: int):
    """Asked by every library call's config lookup: the driver query runs once per device
    (a process may drive GPUs of two kinds)."""
    return targets.device_target(index)


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def gpu_name() -> str:
    """`"nvidia-h200"`: the current CUDA device's name as a file name."""
    import torch
    if not torch.cuda.is_available():
        return "cpu"
    return _device_name(torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    """Asked by every library call's config lookup: the driver query runs once per device."""
    import torch
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(index).lower()).strip("-")


@functools.lru_cache(maxsize=None)
def tuned_table(gpu: str) -> dict:
    """The committed table for `gpu` ({family: {shape class: config}}); empty when absent."""
    path = TUNED_DIR / f"{gpu}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def tune(family: str, key: str, run, candidates, *, reps: int = 20, warmup: int = 3,
         path: Path | None = None) -> dict:
    """Time `run(config)` for every candidate config on the GPU and keep the fastest.

    `run(config)` launches the operation once (e.g. `lambda c: matmul(a, b, out=c_out,
    config=c)`). The winner is written under `family` / `key` into `path` (default
    `tuned/<gpu>.json`), which later lookups on that GPU read. Returns the winner.
    """
    import torch
    if not torch.cuda.is_available():
        raise LaunchError("tune() times kernels on a GPU, and none is available", loc=caller_loc(),
                          help="run it on the GPU machine; CPU backends always use the defaults")
    timings = []
    for cand in candidates:
        for _ in range(warmup):
            run(cand)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            run(cand)
        stop.record()
        torch.cuda.synchronize()
        timings.append((start.elapsed_time(stop) / reps, cand))
    best_ms, best = min(timings, key=lambda t: t[0])
    path = Path(path) if path is not None else TUNED_DIR / f"{gpu_name()}.json"
    table = json.loads(path.read_text()) if path.exists() else {}
    table.setdefault(family, {})[key] = dict(best, time_ms=round(best_ms, 5))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    tuned_table.cache_clear()
    return best
