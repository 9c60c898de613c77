"""Probe: where does a prefill's time go, tilesafe against the plain-PyTorch prefill?

For each size and prompt length: a logit check (the engine's last-row logits against
`TorchQwen3Prefill`'s on the same weights and ids), then per mode the first call (compiles),
the best wall time of a few calls (host included, synchronised), the GPU time between two
events around one call, and a torch.profiler trace of one call: kernel count, summed kernel
time (busy GPU) and the top kernels (count, total and per-launch us). Modes: `eager` (the
engine's eager prefill through `LLM._prefill_ids`), `graph` (the same call with the
engine's prefill graphs, where the engine has them) and `torch` (one pass of cuBLAS/SDPA).
wall >> kernel time means the host is the bottleneck; kernel time above torch's means kernels.

    PYTHONPATH=src python benchmarks/probes/prefill_probe.py --out "$OUT/prefill/prefill.json"
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # benchmarks/, for torch_qwen3

from tilesafe.engine import LLM                                     # noqa: E402
from torch_qwen3 import TorchQwen3Prefill                           # noqa: E402

TOP = 8


def ids_of(n: int, seed: int = 1) -> list[int]:
    g = torch.Generator().manual_seed(seed + n)
    return torch.randint(1000, 100000, (n,), generator=g).tolist()


def engine_logits(llm, ids: list[int]) -> torch.Tensor:
    """The engine's next-token logits (V,) after `ids`, from its own prefill (eager), slot 0."""
    from tilesafe.engine.model import Activations, Qwen3Model
    model = llm.model
    probe = Qwen3Model(model.cfg, model.w, model.cache, None)
    t = len(ids)
    with llm.on_device(), torch.inference_mode():
        a = Activations.allocate(model.cfg, t, 1, llm.dtype, llm.device)
        a.ids.copy_(torch.tensor(ids, dtype=torch.int32))
        a.positions.copy_(torch.arange(t, dtype=torch.int32))
        a.last.copy_(torch.tensor([t - 1], dtype=torch.int32))
        probe.prefill(a, [0, t])
        return a.logits[0].float().clone()


def reference_logits(base: TorchQwen3Prefill, ids: list[int], device) -> torch.Tensor:
    with torch.inference_mode():
        return base(torch.tensor(ids, device=device))[0].float()


def logit_check(got: torch.Tensor, ref: torch.Tensor) -> dict:
    top2 = ref.topk(2).values
    return {"max_abs": round(float((got - ref).abs().max()), 4), "ref_max": round(float(ref.abs().max()), 3),
            "rel": round(float((got - ref).abs().max() / ref.abs().max()), 5),
            "argmax_equal": int(got.argmax()) == int(ref.argmax()),
            "ref_top2_margin": round(float(top2[0] - top2[1]), 4)}


def kernel_table(fn) -> dict:
    """One call of fn under torch.profiler: kernel count, summed kernel us, top kernels."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by: dict = {}
    n = 0
    for e in prof.events():
        if e.device_type.name != "CUDA" or "memcpy" in e.name.lower() or "memset" in e.name.lower():
            continue
        us = e.time_range.end - e.time_range.start
        d = by.setdefault(e.name[:60], [0, 0.0])
        d[0] += 1
        d[1] += us
        n += 1
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:TOP]
    return {"kernels": n, "kernel_us": round(sum(v[1] for v in by.values()), 1),
            "top": [{"name": k, "n": c, "us": round(t, 1), "us_each": round(t / c, 2)} for k, (c, t) in top]}


def timed(fn, reps: int) -> dict:
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    fn()                                            # a graph mode captures on its second call
    torch.cuda.synchronize()
    walls = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    e.synchronize()
    return {"first_ms": round(first_ms, 1), "wall_ms": round(min(walls), 3), "event_ms": round(s.elapsed_time(e), 3),
            **kernel_table(fn)}


def engine_call(llm, ids: list[int], graph: bool):
    """`LLM._prefill_ids([ids])` (what generate's prefill runs) with or without prefill graphs."""
    graphs = getattr(llm, "prefill_graphs", None)

    def run():
        if graphs is not None and not graph:
            llm.prefill_graphs = None
        try:
            with torch.inference_mode():
                llm._prefill_ids([ids])
        finally:
            if graphs is not None:
                llm.prefill_graphs = graphs
    return run


def probe_size(size: str, lengths: list[int], reps: int, deadline: float, tune: bool) -> dict:
    max_len = max(lengths) + 16
    try:                                            # the engine's bucket graphs, where it has them
        llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=max_len, max_num_seqs=1,
                              progress=False, prefill_graphs=True)
    except TypeError:
        llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=max_len, max_num_seqs=1,
                              progress=False)
    base = TorchQwen3Prefill(llm, max_len)
    has_graphs = getattr(llm, "prefill_graphs", None) is not None
    out = {"size": size, "engine_has_prefill_graphs": has_graphs, "lengths": {}}
    for n in lengths:
        r = out["lengths"][str(n)] = {}
        if time.perf_counter() > deadline:
            r["skipped"] = "time budget"
            continue
        ids = ids_of(n)
        ref = None
        try:
            ref = reference_logits(base, ids, llm.device)
            r["logits"] = logit_check(engine_logits(llm, ids), ref)
        except Exception as e:                      # noqa: BLE001 - a probe reports and goes on
            r["logits"] = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
        ids_t = torch.tensor(ids, device=llm.device)
        modes = {"eager": engine_call(llm, ids, False)}
        if has_graphs:
            modes["graph"] = engine_call(llm, ids, True)
        modes["torch"] = lambda: base(ids_t)
        for mode, fn in modes.items():
            if time.perf_counter() > deadline:
                r[mode] = {"skipped": "time budget"}
                continue
            try:
                r[mode] = timed(fn, reps)
            except Exception as e:                  # noqa: BLE001
                r[mode] = {"error": f"{type(e).__name__}: {e}"}
                traceback.print_exc()
            print(f"[{size} {n} {mode}] {json.dumps(r[mode])[:300]}", flush=True)
        if has_graphs and ref is not None and "wall_ms" in r.get("graph", {}):   # the replay's own logits
            graphs = llm.prefill_graphs
            bucket = graphs.buckets[graphs.bucket(n)]
            r["graph"]["captured"] = bucket.graph is not None        # False: a failed capture ran it eagerly
            r["graph_logits"] = logit_check(bucket.a.logits[0].float(), ref)
        r["_ref"] = ref
    # Then each bucket captured again after first-use tuning of its GEMM and attention configs
    # (last: a tuned config stays chosen in this process, for the eager calls too).
    for n in lengths if has_graphs and tune else []:
        r = out["lengths"][str(n)]
        ref = r.pop("_ref", None)
        if time.perf_counter() > deadline or "wall_ms" not in r.get("graph", {}):
            r["graph_tuned"] = {"skipped": "time budget or no graph timing"}
            continue
        try:
            graphs = llm.prefill_graphs
            t0 = time.perf_counter()
            with torch.inference_mode():
                graphs.warm_up([graphs.bucket(n)], tune=True)
            torch.cuda.synchronize()
            r["graph_tuned"] = {"tune_s": round(time.perf_counter() - t0, 2), **timed(engine_call(llm, ids_of(n), True),
                                                                                     reps)}
            if ref is not None:
                r["graph_tuned_logits"] = logit_check(graphs.buckets[graphs.bucket(n)].a.logits[0].float(), ref)
        except Exception as e:                      # noqa: BLE001
            r["graph_tuned"] = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
        print(f"[{size} {n} graph_tuned] {json.dumps(r['graph_tuned'])[:300]}", flush=True)
    for r in out["lengths"].values():
        r.pop("_ref", None)
    del base, llm
    torch.cuda.empty_cache()
    return out


def table(results: list[dict]) -> str:
    lines = [f"{'size':5} {'T':>5} {'mode':6} {'first':>8} {'wall':>8} {'event':>8} {'kernel':>8} {'#k':>5}  "
             f"top kernels (us each x n)  | logits rel / argmax"]
    for res in results:
        if "error" in res:
            lines.append(f"{res.get('size', '?'):5} error: {res['error']}")
            continue
        for n, r in res["lengths"].items():
            lg = r.get("logits", {})
            check = f"{lg.get('rel')} / {lg.get('argmax_equal')}" if "rel" in lg else lg.get("error", "")
            for key in ("graph_logits", "graph_tuned_logits"):
                if key in r:
                    check += f"; {key[:-7]} {r[key]['rel']} / {r[key]['argmax_equal']}"
            for mode in ("eager", "graph", "graph_tuned", "torch"):
                m = r.get(mode)
                if m is None:
                    continue
                if "wall_ms" not in m:
                    lines.append(f"{res['size']:5} {n:>5} {mode.replace('graph_', ''):6} {m}")
                    continue
                tops = ", ".join(f"{t['name'][:22]} {t['us_each']}x{t['n']}" for t in m["top"][:3])
                label = mode.replace("graph_", "")
                lines.append(f"{res['size']:5} {n:>5} {label:6} {m['first_ms']:8.1f} {m['wall_ms']:8.2f} "
                             f"{m['event_ms']:8.2f} {m['kernel_us'] / 1e3:8.2f} {m['kernels']:5}  {tops}"
                             f"{'  | ' + check if mode == 'eager' else ''}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="prefill_probe.json")
    ap.add_argument("--sizes", default="4b,0.6b")
    ap.add_argument("--lengths", default="128,512,2048,777")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=85.0)
    ap.add_argument("--no-tune", dest="tune", action="store_false",
                    help="skip the graph prefill after first-use tuning (tk.first_use_tuning)")
    args = ap.parse_args()
    start = time.perf_counter()
    deadline = start + args.budget_s
    lengths = [int(n) for n in args.lengths.split(",") if n]
    results = []
    sizes = [s for s in args.sizes.split(",") if s]
    for i, size in enumerate(sizes):
        if time.perf_counter() > deadline:
            results.append({"size": size, "error": "skipped: time budget"})
            continue
        share = time.perf_counter() + (deadline - time.perf_counter()) / (len(sizes) - i)   # an equal share each
        try:
            results.append(probe_size(size, lengths, args.reps, share, args.tune))
        except Exception as e:                      # noqa: BLE001
            traceback.print_exc()
            results.append({"size": size, "error": f"{type(e).__name__}: {e}"})
    doc = {"gpu": torch.cuda.get_device_name(), "wall_s": round(time.perf_counter() - start, 1), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print("times in ms; first = first call (compiles); kernel = summed kernel time of one call")
    print(table(results))


if __name__ == "__main__":
    main()
