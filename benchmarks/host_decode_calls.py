"""Where the eager Qwen3-4B decode step's host time goes, call by call (benchmarks/decode_step.py).

host_overhead.py times each library call alone; this times them inside the step, as the
step makes them: per library function, its calls per step and host µs per call (a timing
wrapper around each `tilesafe.kernels` function the step calls), the rest of the step (torch
views, cache appends, the loop), and how each launch started: the plan's fast form
(PlannedLaunch.run), or the full step (kernels/launch.start). Then the step's library calls
replayed (the same arguments): in the step's order, and each call repeated alone as
host_overhead.py times it — per function, so a call that costs more inside the step than
alone shows as the gap between the two columns; and what the step does per step that the
CPU stand-ins leave out (CUDA events recorded, pending registries pruned, HOLDING sweeps).
Then cProfile of a few steps. `--fused`: the step with the library's fused calls (FusedStep).

    PYTHONPATH=src python benchmarks/host_decode_calls.py              # Qwen3-4B shapes on the GPU
    PYTHONPATH=src python benchmarks/host_decode_calls.py --smoke --device cpu   # runs anywhere

Each part is caught on its own: an error is printed and the next part runs.
"""
import argparse
import collections
import cProfile
import io
import pstats
import time
import traceback

import torch

import tilesafe as ts
import tilesafe.kernels as tk
from decode_step import QWEN3_4B, SMOKE, FusedStep, TilesafeStep, TorchStep, caches, weights
from tilesafe.kernels import launch as kernel_launch
from tilesafe.runtime import future
from tilesafe.runtime.planned_launch import PlannedLaunch

FUNCTIONS = ("embedding", "rms_norm", "linear", "rope", "decode_attention", "silu_mul", "argmax", "rms_norm_linear",
             "norm_rope", "silu_mul_linear", "linear_argmax")


class Tally:
    """Per library function: calls and host seconds; launches by how they started."""

    def __init__(self):
        self.calls, self.seconds = collections.Counter(), collections.Counter()
        self.starts = collections.Counter()

    def install(self):
        """Wrap the step's library functions and the two ways a launch starts; returns an undo."""
        undo = []
        for name in FUNCTIONS:
            real = getattr(tk, name)

            def timed(*args, _real=real, _name=name, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _real(*args, **kwargs)
                finally:
                    self.seconds[_name] += time.perf_counter() - t0
                    self.calls[_name] += 1
            setattr(tk, name, timed)
            undo.append((tk, name, real))
        real_run, real_start = PlannedLaunch.run, kernel_launch.start

        def run(launch, roots):
            done = real_run(launch, roots)
            self.starts["fast form" if done else "fast form declined"] += 1
            return done

        def start(*args, **kwargs):
            self.starts["full step (launch.start)"] += 1
            return real_start(*args, **kwargs)
        PlannedLaunch.run = run
        kernel_launch.start = start
        undo += [(PlannedLaunch, "run", real_run), (kernel_launch, "start", real_start)]
        from tilesafe.kernels import call_hits, call_plans
        for mod in (call_hits, call_plans):        # they imported `start` by name
            undo.append((mod, "start", mod.start))
            mod.start = start
        return lambda: [setattr(obj, attr, value) for obj, attr, value in reversed(undo)]


def step_ms(step, steps: int, sync) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    host = (time.perf_counter() - t0) / steps * 1e3
    sync()
    return host


def recorded_calls(step) -> list:
    """(name, function, args, kwargs) of each library call one step makes, in order."""
    calls, undo = [], []
    for name in FUNCTIONS:
        real = getattr(tk, name)

        def kept(*args, _real=real, _name=name, **kwargs):
            calls.append((_name, _real, args, kwargs))
            return _real(*args, **kwargs)
        setattr(tk, name, kept)
        undo.append((name, real))
    try:
        step()
    finally:
        for name, real in undo:
            setattr(tk, name, real)
    return calls


def replay_in_order_and_alone(calls: list, sync, rounds: int = 5, alone_reps: int = 20) -> dict:
    """Per function: (calls, µs per call replayed in the step's order, µs per call repeated
    alone). The fastest of `rounds` rounds each (a shared host only ever adds time)."""
    in_order = collections.Counter()
    best = None
    for _ in range(rounds):
        seconds = collections.Counter()
        sync()
        for name, fn, args, kwargs in calls:
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            seconds[name] += time.perf_counter() - t0
        sync()
        total = sum(seconds.values())
        if best is None or total < best:
            best, in_order = total, seconds
    alone, count = collections.Counter(), collections.Counter()
    for name, fn, args, kwargs in calls:
        fastest = float("inf")
        for _ in range(min(3, rounds)):
            sync()
            t0 = time.perf_counter()
            for _ in range(alone_reps):
                fn(*args, **kwargs)
            fastest = min(fastest, (time.perf_counter() - t0) / alone_reps)
        alone[name] += fastest
        count[name] += 1
    sync()
    return {name: (count[name], in_order[name] / count[name] * 1e6, alone[name] / count[name] * 1e6)
            for name in count}


class Bookkeeping:
    """What one step does that the CPU stand-ins leave out: CUDA events recorded (lazily, by a
    poll or a HOLDING sweep), completions polled (a pending registry at 32 entries polls each of
    them), HOLDING sweeps."""

    def __init__(self):
        self.counts = collections.Counter()

    def install(self):
        undo = []
        for owner, attr, key in ((future.Completion, "ready_event", "CUDA events recorded or reused"),
                                 (future.Holding, "_sweep", "HOLDING sweeps"),
                                 (future.Completion, "done", "completions polled (prunes, waits)")):
            real = getattr(owner, attr)

            def counted(*args, _real=real, _key=key, **kwargs):
                self.counts[_key] += 1
                return _real(*args, **kwargs)
            setattr(owner, attr, counted)
            undo.append((owner, attr, real))
        return lambda: [setattr(o, a, r) for o, a, r in reversed(undo)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--fused", action="store_true", help="the step with the library's fused calls (FusedStep)")
    a = ap.parse_args(argv)
    device, d = a.device, (SMOKE if a.smoke else QWEN3_4B)
    backend = "triton" if device == "cuda" else "reference"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with ts.backend(backend), torch.no_grad():
        w = weights(d, device, dtype)
        ours, theirs = (FusedStep if a.fused else TilesafeStep)(d, w, caches(d, device, dtype), device, dtype), \
            TorchStep(d, w, caches(d, device, dtype), device, dtype)
        for _ in range(3):                                  # compile, record, then the fast forms
            ours(), theirs()
        sync()
        try:
            plain = min(step_ms(ours, a.steps, sync) for _ in range(3))
            torch_ms = min(step_ms(theirs, a.steps, sync) for _ in range(3))
            print(f"step host ms (no sync inside; min of 3 x {a.steps}): tilesafe {plain:.2f}, torch {torch_ms:.2f}")
        except Exception:                                   # noqa: BLE001 - a probe reports and goes on
            traceback.print_exc()
        try:
            tally = Tally()
            undo = tally.install()
            try:
                total = step_ms(ours, a.steps, sync)
            finally:
                undo()
            n = a.steps
            print(f"\nper step, wrapped ({total:.2f} ms a step with the wrappers):")
            print(f"{'function':18s} {'calls':>6s} {'us/call':>9s} {'ms/step':>8s}")
            inside = 0.0
            for name in FUNCTIONS:
                c, s = tally.calls[name], tally.seconds[name]
                if c:
                    inside += s
                    print(f"{name:18s} {c / n:6.0f} {s / c * 1e6:9.1f} {s / n * 1e3:8.2f}")
            print(f"{'rest of the step':18s} {'':6s} {'':9s} {total - inside / n * 1e3:8.2f}")
            print("launches per step: " + ", ".join(f"{k} {v / n:.0f}" for k, v in sorted(tally.starts.items())))
        except Exception:                                   # noqa: BLE001
            traceback.print_exc()
        try:
            calls = recorded_calls(ours)
            rounds, reps = (1, 1) if a.smoke else (5, 20)     # smoke: runs, not timed
            rows = replay_in_order_and_alone(calls, sync, rounds, reps)
            print(f"\nthe step's {len(calls)} library calls replayed (us per call; the fastest of {rounds} rounds):")
            print(f"{'function':18s} {'calls':>6s} {'in order':>9s} {'alone':>9s}")
            n_all = sum(c for c, _, _ in rows.values())
            for name, (c, ordered, alone) in rows.items():
                print(f"{name:18s} {c:6d} {ordered:9.1f} {alone:9.1f}")
            print(f"{'all':18s} {n_all:6d} {sum(c * o for c, o, _ in rows.values()) / n_all:9.1f} "
                  f"{sum(c * al for c, _, al in rows.values()) / n_all:9.1f}")
        except Exception:                                   # noqa: BLE001
            traceback.print_exc()
        try:
            book = Bookkeeping()
            undo = book.install()
            try:
                for _ in range(a.steps):
                    ours()
                sync()
            finally:
                undo()
            print("\nper step: " + (", ".join(f"{k} {v / a.steps:.1f}" for k, v in sorted(book.counts.items()))
                                    or "no CUDA event recorded, no prune, no sweep"))
        except Exception:                                   # noqa: BLE001
            traceback.print_exc()
        try:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(a.steps):
                ours()
            prof.disable()
            sync()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.top)
            print(f"\ncProfile of {a.steps} steps (tottime):\n{out.getvalue()}")
        except Exception:                                   # noqa: BLE001
            traceback.print_exc()


if __name__ == "__main__":
    main()
