"""How a measurement is taken (DESIGN §6), apart from the clock that takes it.

  * Rotation: each launch reads a different set of input buffers, cycling through enough
    sets that the working set is at least 3x the L2 (and at least 180 MB), so no launch
    finds its inputs in the 60 MB L2 left there by the one before.
  * Mode: a kernel shorter than ~50 us is timed inside a captured CUDA graph of many
    launches over the rotated sets, so host launch cost does not count; longer kernels are
    timed eagerly, one event pair per launch, behind a GPU sleep that keeps the queue full.
    Side by side, the fastest implementation's estimate picks the mode for all of them.
  * The result is the median over many samples (a sample is one launch, or one graph replay
    divided by its launches).
  * Side by side: the implementations of one workload are sampled in alternating rounds
    (`measure_side_by_side`), so a GPU that heats up and lowers its clocks during a long
    GEMM slows every implementation alike instead of whichever ran last; each round starts
    with the next implementation, so none always runs first on a GPU that just idled.

`measure` takes any `Timer` (the CUDA one in `cuda_timer.py`, or a fake in the tests).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Protocol

EAGER, GRAPH = "eager", "graph"


@dataclass(frozen=True, slots=True)
class Policy:
    l2_bytes: int = 60_000_000
    l2_factor: int = 3
    min_working_set: int = 180_000_000
    max_sets: int = 256
    graph_below_us: float = 50.0          # kernels shorter than this run in a graph
    graph_target_us: float = 2000.0       # GPU time one graph replay aims at
    max_per_graph: int = 1000
    probe: int = 5                        # eager launches that estimate the kernel's time
    sample_ms: float = 200.0              # GPU time the samples of one measurement aim at
    min_samples: int = 10
    max_samples: int = 100

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Measurement:
    mode: str
    median_us: float
    min_us: float
    samples_us: tuple[float, ...]
    launches_per_sample: int              # 1 eager; the graph's launches in graph mode
    estimate_us: float
    note: str = ""                        # why a short kernel was timed eagerly after all

    def to_json(self) -> dict:
        out = {"mode": self.mode, "median_us": self.median_us, "min_us": self.min_us,
               "launches_per_sample": self.launches_per_sample, "estimate_us": self.estimate_us,
               "samples_us": [round(s, 4) for s in self.samples_us]}
        if self.note:
            out["note"] = self.note
        return out


class Timer(Protocol):
    def eager(self, launch: Callable[[int], object], reps: int) -> list[float]:
        """Per-launch GPU times (us) of `launch(i)` for i in range(reps)."""

    def graph(self, launch: Callable[[int], object], per_graph: int, reps: int, capture: str) -> list[float]:
        """Per-launch GPU times (us): `reps` replays of a graph of `launch(i)`, i < per_graph."""


def rotation_sets(set_bytes: int, policy: Policy = Policy()) -> int:
    """Distinct buffer sets so that together they are >= max(3x L2, 180 MB)."""
    want = max(policy.l2_factor * policy.l2_bytes, policy.min_working_set)
    return max(1, min(policy.max_sets, math.ceil(want / max(1, set_bytes))))


def choose_mode(estimate_us: float, policy: Policy = Policy()) -> str:
    return GRAPH if estimate_us < policy.graph_below_us else EAGER


def launches_per_graph(n_sets: int, estimate_us: float, policy: Policy = Policy()) -> int:
    """Launches captured in one graph: a whole number of passes over the sets (at least one),
    about `graph_target_us` of GPU time, at most `max_per_graph` (rounded to whole passes)."""
    want = math.ceil(policy.graph_target_us / max(estimate_us, 1e-3))
    want = min(max(want, n_sets), max(policy.max_per_graph, n_sets))
    return math.ceil(want / n_sets) * n_sets


def samples_for(estimate_us: float, policy: Policy = Policy()) -> int:
    """How many samples fit in `sample_ms` of GPU time, within [min_samples, max_samples]."""
    return max(policy.min_samples, min(policy.max_samples, int(policy.sample_ms * 1000 / max(estimate_us, 1e-3))))


def measure(timer: Timer, launch: Callable[[int], object], n_sets: int, capture: str,
            policy: Policy = Policy()) -> Measurement:
    """Time `launch(set_index)`: estimate eagerly, pick the mode, take the samples."""
    m = measure_side_by_side(timer, {"it": (launch, n_sets, capture)}, policy, rounds=1)["it"]
    if isinstance(m, Exception):
        raise m
    return m


ROUNDS = 4                                  # alternating rounds of `measure_side_by_side`


def measure_side_by_side(timer: Timer, launches: dict, policy: Policy = Policy(),
                         rounds: int = ROUNDS) -> dict[str, Measurement | Exception]:
    """`measure` for several implementations at once: {name: (launch, n_sets, capture)} ->
    {name: Measurement}, or the exception an implementation's timing raised. Each one's
    samples are taken in at least `rounds` slices (a multiple of the implementations, so
    each leads a round equally often), the implementations taking turns."""
    plans, out = {}, {}
    for name, (launch, n_sets, capture) in launches.items():
        rotate = (lambda f, n: lambda i: f(i % n))(launch, n_sets)
        try:
            estimate = statistics.median(timer.eager(rotate, policy.probe))
        except Exception as e:             # noqa: BLE001 - recorded by the caller
            out[name] = e
            continue
        plans[name] = {"rotate": rotate, "capture": capture, "estimate": estimate, "n_sets": n_sets,
                       "samples": [], "note": ""}
    # One mode for the whole workload, from its fastest implementation: timed eagerly, a
    # launch also pays the gap between launches that a graph hides (about 2 us on the H200,
    # where a 49 us GEMV timed eagerly read 5% slower than its twin, 48.8 us, in a graph).
    mode = choose_mode(min((pl["estimate"] for pl in plans.values()), default=0.0), policy)
    for pl in plans.values():
        per_graph = launches_per_graph(pl["n_sets"], pl["estimate"], policy) if mode == GRAPH else 1
        pl.update(mode=mode, per_graph=per_graph, total=samples_for(pl["estimate"] * per_graph, policy))
    names = list(plans)
    if len(names) > 1:
        rounds = -(-rounds // len(names)) * len(names)       # every implementation leads equally often
    for r in range(rounds):
        # Each round starts with the next implementation, so none always runs first on a GPU
        # that idled while the host prepared the round. (On the H200, twins of the longest
        # GEMMs, their PTX a few integer instructions off tilesafe's, measured 7-11% slower
        # while tilesafe led every round.)
        lead = r % len(names) if names else 0
        for name in names[lead:] + names[:lead]:
            pl = plans[name]
            if name in out:
                continue
            n = -(-pl["total"] // rounds) if r < rounds - 1 else pl["total"] - len(pl["samples"])
            if n <= 0:
                continue
            try:
                if pl["mode"] == GRAPH:
                    try:
                        pl["samples"] += timer.graph(pl["rotate"], pl["per_graph"], n, pl["capture"])
                        continue
                    except Exception as e:     # noqa: BLE001 - e.g. an op that cannot be captured
                        total = samples_for(pl["estimate"], policy)      # one launch a sample from now on
                        pl.update(mode=EAGER, per_graph=1, samples=[], total=total, note=f"graph capture failed, "
                                  f"timed eagerly: {type(e).__name__}: {e}"[:500])
                        n = min(total, -(-total // rounds) * (r + 1))   # catch up on the rounds so far
                pl["samples"] += timer.eager(pl["rotate"], n)
                pl["note"] = "; ".join(filter(None, [pl["note"], getattr(timer, "note", "")]))
            except Exception as e:             # noqa: BLE001 - recorded by the caller
                out[name] = e
    for name, pl in plans.items():
        if name not in out:
            samples = pl["samples"]
            out[name] = Measurement(pl["mode"], statistics.median(samples), min(samples), tuple(samples),
                                    pl["per_graph"], pl["estimate"], pl["note"])
    return {name: out[name] for name in launches if name in out}
