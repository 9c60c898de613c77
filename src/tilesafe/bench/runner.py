"""Running workloads: make the rotated buffer sets, check every implementation against the
fp32 oracle on random data, then time the ones that passed, side by side.

The tilesafe implementation runs first: its check launch is observed, and the twin is built
from what it launched (tiles, grid, Triton options). A wrong result is never timed; the
ones that passed are timed side by side, taking turns (`timing.measure_side_by_side`). An
implementation that raises (a backend missing, a shape it refuses) is recorded with its
error and the run goes on. A time budget stops starting new workloads, so one device call
always ends with results.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from .observe import Observer
from .timing import Policy, measure_side_by_side, rotation_sets
from .workload import BANDWIDTH, BASELINE, TILESAFE, TORCH, TWIN, Impl, Workload, rel_error

ORDER = {TILESAFE: 0, TWIN: 1, TORCH: 2, BASELINE: 3}
BASELINE_TOLERANCE = 1e-4                # a copy is exact; a read sums in another order


@dataclass(slots=True)
class Options:
    policy: Policy = field(default_factory=Policy)
    budget_s: float | None = None          # stop starting workloads after this many seconds
    on_result: object = None               # called with the results so far after each workload
    eager_too: bool = False                # also time every implementation eagerly, beside the graph time


def steps(w: Workload) -> int:
    """Progress steps of a workload: one per implementation (the twin included)."""
    return len(w.impls) + (1 if w.twin is not None else 0)


def run_all(workloads, timer, options: Options, progress, clock=time.monotonic) -> list[dict]:
    """Results of every workload, in order; `timer=None` only checks (the dry run)."""
    start, results = clock(), []
    for w in workloads:
        if options.budget_s is not None and clock() - start > options.budget_s:
            rec = header(w)
            rec.update(status="skipped", error=f"time budget of {options.budget_s:.0f} s spent")
            progress.step(f"{w.name}: skipped", steps(w))
        else:
            rec = run_workload(w, timer, options.policy, progress, options.eager_too)
        results.append(rec)
        if options.on_result is not None:
            options.on_result(results)
    return results


def header(w: Workload) -> dict:
    return {"family": w.family, "name": w.name, "params": w.params, "dtype": w.dtype, "metric": w.metric,
            "bytes": w.bytes, "flops": w.flops, "tolerance": w.tol(), "status": "ok", "impls": {}}


def run_workload(w: Workload, timer, policy: Policy, progress, eager_too: bool = False) -> dict:
    rec = header(w)
    try:
        sets = make_sets(w.make, policy)
        reference = w.reference(sets[0])
    except Exception as e:                       # noqa: BLE001 - recorded, the run goes on
        rec.update(status="error", error=describe(e))
        progress.step(f"{w.name}: {rec['error'][:40]}", steps(w))
        _release()
        return rec
    rec["rotation"] = {"sets": len(sets), "set_bytes": set_bytes(sets[0]), "working_set_bytes":
                       len(sets) * set_bytes(sets[0])}
    queue = sorted(w.impls, key=lambda i: ORDER[i.role])
    passed = {}                                  # name -> (impl, its buffers): timed below
    while queue:
        impl = queue.pop(0)
        if impl.role == TILESAFE:
            with Observer(w.observe) as seen:
                result, buffers = check_impl(w, impl, sets, reference, policy)
            rec["tiling"] = {name: facts.to_json() for name, facts in seen.items()}
            if w.twin is not None:
                queue.insert(0, _twin(w, seen))
        else:
            result, buffers = check_impl(w, impl, sets, reference, policy)
        rec["impls"][impl.name] = result
        if result["status"] == "ok":
            passed[impl.name] = (impl, buffers)
        progress.step(f"{w.name}: {impl.name} {result['status']}")
    if timer is not None and passed:
        launches = {name: ((lambda f, b: lambda i: f(b[i]))(impl.call, buffers), len(buffers), impl.capture)
                    for name, (impl, buffers) in passed.items()}
        for name, m in measure_side_by_side(timer, launches, policy).items():
            impl, buffers = passed[name]
            out = rec["impls"][name]
            if isinstance(m, Exception):
                out.update(status="error", error=describe(m))
                continue
            out.update(m.to_json())
            out.update(rates(w, impl, m.median_us))
            if buffers is not sets:
                out["rotation_sets"] = len(buffers)
        if eager_too:
            _time_eagerly(rec, launches, timer, policy)
    del sets, reference, passed
    _release()
    return rec


def _time_eagerly(rec: dict, launches: dict, timer, policy: Policy) -> None:
    """Each implementation's eager time (one event pair per launch, host gaps included where
    the GPU waits for them) under `eager`, beside the main (graph) time."""
    eager = dataclasses.replace(policy, graph_below_us=0.0)
    ok = {n: launch for n, launch in launches.items() if rec["impls"][n].get("status") == "ok"}
    for name, m in measure_side_by_side(timer, ok, eager).items():
        rec["impls"][name]["eager"] = ({"error": describe(m)} if isinstance(m, Exception) else
                                       {"median_us": m.median_us, "min_us": m.min_us, "mode": m.mode})


def _twin(w: Workload, seen) -> Impl:
    """The twin built from the observed launches; one that raises its reason when it cannot be."""
    try:
        if not seen:
            raise RuntimeError("the tilesafe call launched nothing to mirror")
        return w.twin(seen)
    except Exception as e:                       # noqa: BLE001 - recorded as the twin's error
        reason = describe(e)

        def refuse(_):
            raise RuntimeError(reason)
        return Impl("twin", TWIN, refuse)


def check_impl(w: Workload, impl: Impl, sets, reference, policy: Policy) -> tuple[dict, list | None]:
    """(its record so far, the buffer sets it is timed on): checked on poisoned outputs."""
    out = {"role": impl.role, "status": "ok"}
    try:
        buffers = make_sets(impl.make, policy) if impl.make is not None else sets
        err = check(w, impl, buffers[0], reference)
        out["rel_error"] = err
        if not err <= (w.tol() if impl.check is None else BASELINE_TOLERANCE):
            out["status"] = "wrong"
            return out, None
        return out, buffers
    except Exception as e:                       # noqa: BLE001 - recorded, the run goes on
        out.update(status="error", error=describe(e))
        return out, None


def check(w: Workload, impl: Impl, buffers: dict, reference) -> float:
    """Relative error of one launch on poisoned outputs: NaN, or for integer outputs (indices)
    the dtype's minimum, shows any element not written."""
    if impl.make is None and w.output in buffers:
        out = buffers[w.output]
        if out.is_floating_point():
            out.fill_(float("nan"))
        elif out.dtype != torch.bool:
            out.fill_(torch.iinfo(out.dtype).min)
    got = impl.call(buffers)
    _sync(buffers)
    if impl.check is not None:
        return impl.check(buffers, got)
    return rel_error(got, reference)


def rates(w: Workload, impl: Impl, median_us: float) -> dict:
    """TB/s of the bytes it moves (every bandwidth workload and baseline), TFLOP/s of the FLOPs."""
    seconds = median_us * 1e-6
    moved = impl.bytes if impl.bytes is not None else w.bytes
    out = {"bytes": moved, "tbps": moved / seconds / 1e12}
    if w.metric != BANDWIDTH and impl.role != BASELINE:
        out["tflops"] = w.flops / seconds / 1e12
    return out


def make_sets(make, policy: Policy) -> list[dict]:
    first = make(0)
    n = rotation_sets(set_bytes(first), policy)
    return [first] + [make(i) for i in range(1, n)]


def set_bytes(buffers: dict) -> int:
    seen, total = set(), 0
    for t in buffers.values():
        if isinstance(t, torch.Tensor):
            key = (t.device, t.untyped_storage().data_ptr())
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
    return total


def describe(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text}"[:1500]


def _sync(buffers: dict) -> None:
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in buffers.values()):
        torch.cuda.synchronize()


def _release() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
