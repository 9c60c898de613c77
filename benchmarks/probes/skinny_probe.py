"""Probe (issues 19, 17): batched decode GEMMs (M = 2..128 rows) against the weight-read rate.

At batch 1 the engine's GEMVs stream the weights at ~3.7 TB/s; at batch 32 its GEMMs reach
2.0-2.5 TB/s. Per Qwen3 4B/8B decode weight (qkv, o, gate_up, down) and M, timed on the GPU:
  torch     cuBLAS (torch.matmul(x, w.T, out=)), in a CUDA graph;
  linear    `kernels.linear` as the engine calls it (the tuned table / config model's pick);
  rowmajor  `kernels.linear` with the streaming rule's row-major config (17..128 rows: the default
            before session 20's weight-major rule; elsewhere the default again);
  wm*       `kernels.linear` with a weight-major config (kernels/weight_major.py: the weight
            tile as the MMA's wide operand, rows padded to 16..128, K split where the column
            tiles do not fill the SMs): wm64 (64 weight rows, K tile 128, automatic split,
            the backend's TMA choice: the config model's rule), wm64p (the same on pointers),
            wm128 (128 rows), wm64x2 (wm64 with twice its split);
  gemv      `kernels.linear` at M = 1 on the same weight (the rate to reach).
Each weight has copies enough to pass 256 MB (L2 holds none of them between calls); each case
runs once on copy 0 and is checked against the fp32 product first, then a graph over the copies
is replayed, queued behind a GPU sleep (queued_ms), and the time per call is reported in us and
TB/s of the weight read. M is taken in order of interest (32, 8, 128, 16, 64, 4, 2) until
SKINNY_BUDGET_S (default 70 s) is spent. Every case catches its own errors; a table at the end.
SKINNY_M, SKINNY_MODELS and SKINNY_IMPLS (comma lists) narrow it; SKINNY_GEMV=0 skips the M = 1 rows.
    PYTHONPATH=src python3 benchmarks/probes/skinny_probe.py "$OUT/skinny.json"
"""
import json
import math
import os
import sys
import time

import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels import config_model as cm
from tilesafe.kernels import gemm_model as GM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # queued_ms, beside this file
from queued_ms import queued_ms  # noqa: E402

T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("SKINNY_BUDGET_S", "70"))
ROWS = [int(m) for m in os.environ.get("SKINNY_M", "32,8,128,16,64,4,2").split(",") if m]
MODELS = os.environ.get("SKINNY_MODELS", "4B,8B").split(",")
# (N, K) of the decode weights: Qwen3-4B (hidden 2560, 32:8 heads of 128, MLP 9728), 8B (4096, 32:8, 12288)
WEIGHTS = {"4B": {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560), "down": (2560, 9728)},
           "8B": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}}
PASS_L2 = 256 << 20
WM = {"weight_major": True, "num_warps": 4, "split_k": None, "tma": None}
CANDIDATES = {"wm64": dict(WM, block_n=64, block_k=128, num_stages=4),       # gemm_model.weight_major_choice's
              "wm64p": dict(WM, block_n=64, block_k=128, num_stages=4, tma=False),
              "wm128": dict(WM, block_n=128, block_k=128, num_stages=4),
              "wm64x2": "twice the automatic split of wm64"}
IMPLS = os.environ.get("SKINNY_IMPLS", ",".join(["torch", "linear", "rowmajor", *CANDIDATES])).split(",")
GEMV = os.environ.get("SKINNY_GEMV", "1") == "1"                  # the M = 1 reference rows
SLEEP = 10_000_000               # ~5 ms: the host queues a case's 12 graph replays well within it


def left() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


class Weight:
    """A weight's copies (random, bf16, as a checkpoint's scale) and the inputs and outputs of M rows."""

    def __init__(self, n: int, k: int):
        self.n, self.k = n, k
        self.bytes = n * k * 2
        count = max(2, math.ceil(PASS_L2 / self.bytes))
        self.ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(count)]

    def rows(self, m: int):
        xs = [torch.randn(m, self.k, device="cuda", dtype=torch.bfloat16) for _ in self.ws]
        outs = [torch.empty(m, self.n, device="cuda", dtype=torch.bfloat16) for _ in self.ws]
        return xs, outs


def ours(wt: Weight, xs, outs, config):
    def run(i=None):
        for j, (x, w, o) in enumerate(zip(xs, wt.ws, outs)):
            if i is None or i == j:
                tk.linear(x, w, out=o, config=config)
    run(0)
    torch.cuda.synchronize()
    yield                                            # checked here
    run()
    torch.cuda.synchronize()
    with ts.graph(pdl=False) as g:
        run()
    yield g.replay


def cublas(wt: Weight, xs, outs):
    def run(i=None):
        for j, (x, w, o) in enumerate(zip(xs, wt.ws, outs)):
            if i is None or i == j:
                torch.matmul(x, w.t(), out=o)
    run(0)
    torch.cuda.synchronize()
    yield
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    yield g.replay


def twice_the_split(m: int, n: int, k: int) -> dict:
    """wm64 with twice the K splits its rule picks (two waves of blocks, each half as long)."""
    bm, bn, bk = max(16, min(GM.WEIGHT_MAJOR_MAX_ROWS, 1 << (m - 1).bit_length())), min(64, n), min(128, k)
    stages = GM.weight_major_stages(4, bm, bn, bk, 2)
    slots = GM.weight_major_slots(bm, bn, bk, stages, 2, torch.cuda.get_device_properties(0).multi_processor_count,
                                  228 * 1024)
    split = GM.weight_major_splits(None, -(-m // bm) * -(-n // bn), -(-k // bk), slots)
    return dict(CANDIDATES["wm64"], split_k=min(2 * split, -(-k // bk)))


def row_major(m: int, n: int, k: int) -> dict | None:
    """The streaming rule's row-major config (gemm_model.streaming_choice without its weight-major
    pick): `linear`'s default before session 20 where the rule applies (None: the model's own)."""
    saved = GM.WEIGHT_MAJOR_ROWS
    GM.WEIGHT_MAJOR_ROWS = (0, 0)
    try:
        c = GM.streaming_choice(cm.Gemm(m, n, k, "bf16"), cm.gpu_of(None))
    finally:
        GM.WEIGHT_MAJOR_ROWS = saved
    return dict(c) if c else None


def config_of(name: str, m: int, wt: Weight):
    if name == "wm64x2":
        return twice_the_split(m, wt.n, wt.k)
    if name == "rowmajor":
        return row_major(m, wt.n, wt.k)
    return CANDIDATES.get(name)


def case(rows: list, model: str, weight: str, wt: Weight, m: int, impl: str, config, xs, outs) -> None:
    row = {"model": model, "weight": weight, "n": wt.n, "k": wt.k, "m": m, "impl": impl, "config": config}
    try:
        if left() < 0:
            row["error"] = "skipped: budget spent"
            rows.append(row)
            return
        outs[0].fill_(float("nan"))
        steps = cublas(wt, xs, outs) if impl == "torch" else ours(wt, xs, outs, config)
        next(steps)
        ref = xs[0].float() @ wt.ws[0].float().T
        err = ((outs[0].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
        row["err"] = round(err, 5)
        if not err < 2e-2:
            raise AssertionError(f"max error {err} of the largest |ref|")
        replay = next(steps)
        us = queued_ms(replay, 10, warm=2, sleep_cycles=SLEEP) * 1e3 / len(wt.ws)
        row.update(us=round(us, 2), TB_s=round(wt.bytes / us / 1e6, 3))
    except Exception as e:                           # noqa: BLE001 - reported in the table
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    rows.append(row)
    print(json.dumps(row), flush=True)


def table(rows: list) -> None:
    impls = ["gemv", "torch", "linear", "rowmajor", *CANDIDATES]
    print(f"\n{'model':5} {'weight':8} {'M':>4} " + " ".join(f"{i:>14}" for i in impls) + "   best wm / linear")
    keys = sorted({(r["model"], r["weight"], r["m"]) for r in rows if r["m"] > 1},
                  key=lambda t: (t[0], t[2], t[1]))
    for model, weight, m in keys:
        got = {r["impl"]: r for r in rows if (r["model"], r["weight"]) == (model, weight) and r["m"] in (m, 1)
               and (r["impl"] == "gemv") == (r["m"] == 1)}
        cells = []
        for i in impls:
            r = got.get(i)
            cells.append(f"{r['us']:6.2f}/{r['TB_s']:5.2f}" if r and "us" in r else f"{'err' if r else '-':>14}")
        wms = [got[i]["us"] for i in CANDIDATES if i in got and "us" in got[i]]
        ratio = f"{got['linear']['us'] / min(wms):.3f}" if wms and "us" in got.get("linear", {}) else "-"
        print(f"{model:5} {weight:8} {m:4} " + " ".join(f"{c:>14}" for c in cells) + f"   {ratio}")
    print("\n(us / TB/s of the weight read; 'best wm / linear' > 1: a weight-major config is faster)")
    print("\nper model and M, the four weights' sum (us): linear, each wm, the best wm per weight, torch")
    for model in MODELS:
        for m in sorted({r["m"] for r in rows if r["m"] > 1}):
            mine = [r for r in rows if r["model"] == model and r["m"] == m and "us" in r]
            total = {i: sum(r["us"] for r in mine if r["impl"] == i) for i in ["linear", "torch", "rowmajor",
                                                                                *CANDIDATES]}
            count = {i: sum(1 for r in mine if r["impl"] == i) for i in total}
            best = 0.0
            for weight in WEIGHTS[model]:
                wms = [r["us"] for r in mine if r["weight"] == weight and r["impl"] in CANDIDATES]
                best += min(wms) if wms else float("nan")
            print(f"{model:3} M={m:<4} " + " ".join(f"{i} {total[i]:7.2f}{'' if count[i] == 4 else '*'}"
                                                     for i in total) + f" best-wm {best:7.2f}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "skinny.json"
    rows = []
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    weights = {}
    for model in MODELS:
        for weight, (n, k) in WEIGHTS[model].items():
            try:
                weights[model, weight] = Weight(n, k)
            except Exception as e:                   # noqa: BLE001
                print(f"{model} {weight}: {type(e).__name__}: {e}", flush=True)
    for (model, weight), wt in weights.items() if GEMV else ():   # the rate to reach: one row, the GEMV
        xs, outs = wt.rows(1)
        case(rows, model, weight, wt, 1, "gemv", None, xs, outs)
    for m in ROWS:
        for (model, weight), wt in weights.items():
            xs, outs = wt.rows(m)
            for name in IMPLS:
                config = config_of(name, m, wt)
                case(rows, model, weight, wt, m, name, config, xs, outs)
        with open(out, "w") as f:                    # after each M: a run cut short keeps what it measured
            json.dump({"rows": rows, "wall_s": round(time.perf_counter() - T0, 1)}, f, indent=1)
    table(rows)
    print(f"\nwall {time.perf_counter() - T0:.1f} s")


if __name__ == "__main__":
    main()
