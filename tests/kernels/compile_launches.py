"""Library calls compiled instead of launched, for the compile tests (sm_90, AMD, the engine's
fused kernels, the prefetching GEMV): the public functions run with the `triton` backend's
configs, and each launch becomes a compile of `ts.spec`s of the same views — no GPU and no
memory traffic needed."""
import sys

import tilesafe as ts
from tilesafe.kernels import call_plans, configs
from tilesafe.kernels.launch import schedule_with


def spec_of(t, tile=None):
    return ts.spec(t.shape, t.dtype, t.strides, tile=tile)


def compile_launches(monkeypatch, modules, compile_one, force_pdl: bool = False) -> list:
    """Replace the launches of `tilesafe.kernels.<name>` for each name in `modules` by
    `compile_one(kernel, specs, schedule)`, the schedule being the launch config's hints (warps,
    stages, TMA, waves_per_eu) and its PDL (always on with `force_pdl`, as in a decode graph
    captured with it). Returns the list that collects (kernel name, what compile_one returned)."""
    out = []

    def compile_instead(kernel, outputs, grid=None, cfg=None, pdl=False, **args):
        specs = {n: spec_of(v, tile) for n, (v, tile) in outputs.items()}
        specs.update({n: spec_of(a) if isinstance(a, ts.Tensor) else a for n, a in args.items()})
        out.append((kernel.name, compile_one(kernel, specs, schedule_with(cfg, pdl or force_pdl))))

    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    # Every call takes its full path, which calls the replaced launch (a call plan redoes its
    # launches without it: kernels/call_plans.py).
    monkeypatch.setattr(call_plans, "call_key", lambda *a: (None, None))
    for name in modules:
        monkeypatch.setattr(sys.modules[f"tilesafe.kernels.{name}"], "launch", compile_instead)
    return out
