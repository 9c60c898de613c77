"""Where the eager Qwen3-4B decode step's host time goes, call by call (benchmarks/decode_step.py).

host_overhead.py times each library call alone; this times them inside the step, as the
step makes them: per library function, its calls per step and host µs per call (a timing
wrapper around each `tilesafe.kernels` function the step calls), the rest of the step (torch
views, cache appends, the loop), and how each launch started: the plan's fast form
(PlannedLaunch.run), or the full step (kernels/launch.start). Then cProfile of a few steps.

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
from decode_step import QWEN3_4B, SMOKE, TilesafeStep, TorchStep, caches, weights
from tilesafe.kernels import launch as kernel_launch
from tilesafe.runtime.planned_launch import PlannedLaunch

FUNCTIONS = ("embedding", "rms_norm", "linear", "rope", "decode_attention", "silu_mul", "argmax")


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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=35)
    a = ap.parse_args(argv)
    device, d = a.device, (SMOKE if a.smoke else QWEN3_4B)
    backend = "triton" if device == "cuda" else "reference"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with ts.backend(backend), torch.no_grad():
        w = weights(d, device, dtype)
        ours, theirs = TilesafeStep(d, w, caches(d, device, dtype), device, dtype), \
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
