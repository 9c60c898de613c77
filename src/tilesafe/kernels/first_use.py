"""A short autotune of the library's GEMM and flash-attention configs on first use.

    with tk.first_use_tuning():           # opt-in: the first call of each shape bucket is timed
        y = tk.linear(x, w)

The config model (`config_model.py`) ranks its candidates by a rough model; where that is
not enough, the first call of a shape bucket (the family's most specific shape class: for
a GEMM, the weight's N x K with M bucketed) times the model's best few distinct candidates
on the GPU (`config_model.ranked`: four kinds, and where a rule applies its pick, for few
output tiles the balanced split, for one row by a short K three GEMV forms: at most seven;
`queued_timer`), keeps the fastest, and saves it per GPU in the user cache
(`TILESAFE_CACHE_DIR/library/<gpu>.json`), which later processes read instead of timing.

Opt-in, not the default, as `@ts.autotune`'s tuning is opt-in (`tile=ts.auto`): timing
synchronises the device and runs the call about thirty times, which a program that did not ask
must never see in its first step's latency (a server's first request, a captured graph's
warm-up). Shapes with a tuned entry made for them, a `config=` override, CPU backends, a
graph capture and a compile-ahead never tune. The timing calls are not recorded into the
call's plan (call_plans.py): a later call of that layout redoes only the chosen config.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import os
import tempfile
import time
from pathlib import Path

from ..backends.triton import targets
from ..settings import SETTINGS, current_backend, graph_var, launching_disabled_var
from . import call_recording

CANDIDATES = 4
_on: contextvars.ContextVar[bool] = contextvars.ContextVar("tilesafe_first_use_tuning", default=False)
_memory: dict = {}                     # (gpu, family, key) -> config, for this process


@contextlib.contextmanager
def first_use_tuning(enabled: bool = True):
    """Within the block, the first library GEMM / flash-attention call of each untuned shape
    bucket times the config model's best candidates and keeps the fastest (cached on disk)."""
    token = _on.set(bool(enabled))
    try:
        yield
    finally:
        _on.reset(token)


def wanted() -> bool:
    """Whether a call here may tune: asked for, on a GPU, not capturing, not compiling ahead."""
    return (_on.get() and current_backend() == "triton" and graph_var.get() is None
            and not launching_disabled_var.get() and targets.compile_target() is None)


def pick(family: str, key: str, candidates: list[dict], run, gpu: str, timer=None) -> dict:
    """The fastest of `candidates` (whole configs) for `run(config)`, from this process's
    memory, else the user cache, else timed now (then saved); the first candidate when none
    runs (the model's choice, which the call then runs and reports on its own). `timer`:
    (config, run) -> ms, `queued_timer` by default."""
    mem = (gpu, family, key)
    if mem in _memory:
        return _memory[mem]
    stored = _read(gpu).get(family, {}).get(key)
    if isinstance(stored, dict):
        known = [c for c in candidates if _same(c, stored)]
        if known:
            _memory[mem] = known[0]
            return known[0]
    best, best_ms = candidates[0], None
    token = call_recording.ACTIVE.set(None)        # timing calls are not part of the caller's plan
    try:
        for cand in candidates:
            ms = _time(run, cand, timer)
            if ms is not None and (best_ms is None or ms < best_ms):
                best, best_ms = cand, ms
    finally:
        call_recording.ACTIVE.reset(token)
    _memory[mem] = best
    if best_ms is not None:
        _write(gpu, family, key, dict(best, time_ms=round(best_ms, 5)))
    return best


def _time(run, cand: dict, timer) -> float | None:
    """Milliseconds of `run(cand)` (after one warm-up that compiles); None if it fails."""
    try:
        return (timer or queued_timer)(cand, lambda: run(cand))
    except Exception:                  # noqa: BLE001 - a candidate that fails is dropped
        return None


REPS = 5
CYCLES_PER_US = 2000                   # about the H100/H200 boost clock, as torch.cuda._sleep counts


def queued_timer(config, run) -> float:
    """GPU milliseconds of one `run()`: REPS calls queued behind a GPU sleep long enough for
    the host to enqueue them all, between two events, so the time is the kernels' and not the
    host's (a call's ~20 us of host work would hide the difference between two configs of a
    10 us product, and count a split-K's second launch twice)."""
    import torch
    run()                                                # compiles, and shows the config launches
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize()
    once_us = (time.perf_counter() - t0) * 1e6           # host and GPU: more than the host's share
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(min(2 * REPS * once_us + 200.0, 500_000.0) * CYCLES_PER_US))
    start.record()
    for _ in range(REPS):
        run()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / REPS


def _same(cand: dict, stored: dict) -> bool:
    return all(stored.get(k) == v for k, v in cand.items())


def cache_path(gpu: str) -> Path:
    return SETTINGS.cache_dir / "library" / f"{gpu}.json"


def _read(gpu: str) -> dict:
    try:
        table = json.loads(cache_path(gpu).read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _write(gpu: str, family: str, key: str, entry: dict) -> None:
    """Merge one entry into the user cache, atomically (another process may be writing)."""
    path = cache_path(gpu)
    table = _read(gpu)
    table.setdefault(family, {})[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass                           # a read-only cache: the choice still holds in memory


def forget() -> None:
    """Drop this process's remembered choices (tests; the disk cache stays)."""
    _memory.clear()


def remembered(gpu: str, family: str, key: str) -> dict | None:
    """The config this process chose for one shape bucket, if it tuned or read one."""
    return _memory.get((gpu, family, key))
