"""Host cost of a safe launch vs a raw Triton launch, graph replay cost, compile times.

Run on a GPU: `PYTHONPATH=src python benchmarks/launch_overhead.py OUT.json`.
Every number is measured in this one run, side by side.
"""
import json
import os
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl

import tilesafe as ts
from host_timing import host_us_per_call, host_us_side_by_side   # benchmarks/ is the script's directory


@ts.kernel
def add3(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


@triton.jit
def raw_add3(z, x, y, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(z + offs, tl.load(x + offs) + tl.load(y + offs))


def main(out_path: str) -> None:
    n = 1024
    x, y = ts.rand(n, seed=1), ts.rand(n, seed=2)
    z = ts.empty(n)
    p = z.partition((1024,))
    tx, ty, tz = x._torch(), y._torch(), z._torch()
    side = host_us_side_by_side({"safe": lambda: add3(p, x, y),
                                 "raw": lambda: raw_add3[(1,)](tz, tx, ty, n, B=1024)})
    safe, raw = side["safe"], side["raw"]
    # where a safe launch's host time goes (diagnostics)
    plan = add3._last_plan
    parts = {
        "plan_match_us": host_us_per_call(lambda: plan.matches((p, x, y), {}, None, "triton")),
        "prepared_launch_us": host_us_per_call(plan.launch),
        "event_record_us": host_us_per_call(lambda: torch.cuda.Event().record()),
    }

    # graph replay: 100 captured launches, per-kernel cost
    with ts.graph() as g:
        for _ in range(100):
            add3(p, x, y)
    g.replay().sync()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    reps = 200
    for _ in range(reps):
        g.replay()
    torch.cuda.synchronize()
    graph_us = (time.perf_counter() - t0) / (reps * 100) * 1e6
    p.unpartition()

    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(ts.settings.cache_dir, "triton-cache-bench"))
    subprocess.run(["rm", "-rf", env["TRITON_CACHE_DIR"]], check=True)
    compile_times = json.loads(subprocess.run([sys.executable, __file__, "--compile-times"], capture_output=True,
                                              text=True, check=True, env=env).stdout)
    warm = json.loads(subprocess.run([sys.executable, __file__, "--compile-times"], capture_output=True,
                                     text=True, check=True, env=env).stdout)
    result = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "safe_launch_us": safe, "raw_triton_launch_us": raw, "ratio_safe_over_raw": safe / raw,
        "graph_replay_us_per_kernel": graph_us, "breakdown": parts,
        "first_call_s": compile_times, "warm_start_from_disk_cache_s": warm,
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    if sys.argv[1:] == ["--compile-times"]:
        out = {}
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()    # CUDA context start-up is not compile time
        t0 = time.perf_counter()
        x, y = ts.rand(1000, seed=1), ts.rand(1000, seed=2)
        add3(ts.empty(1000).partition((128,)), x, y).sync()
        out["vector_add"] = time.perf_counter() - t0
        import numpy as np

        @ts.kernel
        def gemm(c: ts.Mut[ts.bf16, ("BM", "BN")], a: ts.Ref[ts.bf16, ("M", "K")], b: ts.Ref[ts.bf16, ("K", "N")],
                 BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
            pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
            acc = ts.zeros((BM, BN), ts.f32)
            for k in range(ts.num_tiles(pa, 1)):
                acc = ts.mma(pa.load((ts.block_id(0), k)), pb.load((k, ts.block_id(1))), acc)
            c.store(acc.astype(ts.bf16))

        a = ts.tensor(np.random.rand(512, 512).astype(np.float32), dtype=ts.bf16)
        t0 = time.perf_counter()
        gemm(ts.empty((512, 512), ts.bf16).partition((128, 128)), a, a, BK=64).sync()
        out["gemm_bf16"] = time.perf_counter() - t0
        print(json.dumps(out))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "launch_overhead.json")
