"""Probe: where does a replayed batch-1 engine decode step spend its time?

For each size: the replayed step timed back to back, timed with a GPU sleep in front (so the
host enqueue is hidden), the host seconds one `graph.replay()` call takes, and a CUDA trace of
one replay behind a GPU sleep: kernel count, kernel time, the idle gaps between consecutive
kernels (median, sum, largest five with the kernels around them). JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/engine_step_gaps.py "$OUT/gaps.json" 0.6b,4b
"""
import json
import statistics
import sys
import time

import torch

from tilesafe.engine import LLM


def _events(fn):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(50_000_000)
        fn()
        torch.cuda.synchronize()
    ev = sorted((e for e in prof.events() if e.device_type.name == "CUDA" and "sleep" not in e.name),
                key=lambda e: e.time_range.start)
    return ev


def probe(size: str) -> dict:
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, progress=False)
    llm.generate([{"prompt_token_ids": [1, 2, 3, 4] * 8}], __import__("tilesafe.engine", fromlist=["SamplingParams"]).SamplingParams(
        max_tokens=4, temperature=0.0))
    step = llm.decode_steps.steps.get(1)
    graphs = getattr(step, "graphs", None)     # per greedy/sampling step where the engine has both
    g = graphs.get(True) if graphs is not None else getattr(step, "graph", None)
    out = {"size": size, "graph": g is not None}
    if not out["graph"]:
        return out
    with torch.inference_mode():
        step.a.positions.fill_(159); step.a.lens.fill_(160); step.a.slots.fill_(159)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(50):
        g.replay()
    e.record(); torch.cuda.synchronize()
    out["back_to_back_ms"] = s.elapsed_time(e) / 50
    torch.cuda._sleep(200_000_000)                  # host runs ahead while the GPU sleeps
    s.record()
    t0 = time.perf_counter()
    for _ in range(20):
        g.replay()
    out["host_replay_us"] = (time.perf_counter() - t0) / 20 * 1e6
    e.record(); torch.cuda.synchronize()
    out["behind_sleep_ms"] = s.elapsed_time(e) / 20
    ev = _events(g.replay)
    k = [x for x in ev if "memcpy" not in x.name.lower() and "memset" not in x.name.lower()]
    gaps = [(b.time_range.start - a.time_range.end, a.name[:40], b.name[:40]) for a, b in zip(k, k[1:])]
    out["kernels"] = len(k)
    out["other_activities"] = [x.name[:60] for x in ev if x not in k][:10]
    out["kernel_us"] = sum(x.time_range.end - x.time_range.start for x in k)
    out["span_us"] = k[-1].time_range.end - k[0].time_range.start if k else None
    out["gap_median_us"] = statistics.median(g_[0] for g_ in gaps) if gaps else None
    out["gap_sum_us"] = sum(g_[0] for g_ in gaps)
    out["largest_gaps"] = sorted(gaps, reverse=True)[:5]
    by = {}
    for x in k:
        d = by.setdefault(x.name[:50], [0, 0.0, []]); d[0] += 1; d[1] += x.time_range.end - x.time_range.start
        d[2].append(x.time_range.end - x.time_range.start)
    out["per_kernel"] = {n: {"n": c, "us": round(t, 1), "median_us": round(statistics.median(l), 2)}
                         for n, (c, t, l) in sorted(by.items(), key=lambda kv: -kv[1][1])}
    del llm
    torch.cuda.empty_cache()
    return out


def main():
    res = [probe(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "0.6b,4b").split(",")]
    json.dump(res, open(sys.argv[1], "w"), indent=1)
    for r in res:
        print(r["size"], {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                          if k in ("back_to_back_ms", "behind_sleep_ms", "host_replay_us", "kernels", "kernel_us",
                                   "span_us", "gap_median_us", "gap_sum_us")})
        print("  gaps:", r.get("largest_gaps"))
        for n, v in list(r.get("per_kernel", {}).items())[:10]:
            print("  ", n, v)


if __name__ == "__main__":
    main()
