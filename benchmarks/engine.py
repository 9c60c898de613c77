"""Qwen3 engine throughput on one GPU, random weights of the real shapes built on the device.

    PYTHONPATH=src python benchmarks/engine.py --sizes 0.6b,4b --out benchmarks/results/h200/engine.json
    PYTHONPATH=src python benchmarks/engine.py --quick        # ~2 minutes: fewer tokens, batches and prefills

Per size, in this order:
- correctness first: the engine's greedy tokens against the PyTorch baseline's on the same
  weights for a few steps after a short prompt (bf16 random weights: near-ties may diverge,
  so the agreement is reported, not required);
- decode tokens/s at batch 1 through the public `LLM.generate` (host included): generated
  tokens after the first over the decode time (the whole call minus a prefill-only call of
  the same prompt), for 256 tokens after a prompt of 128 (and of 4096 with --long); Grout's
  request metric (all tokens over the whole call);
- the replayed decode step: one `ts.graph()` replay timed three ways — back to back on the
  device (CUDA events around many replays: host-bound if a replay's host cost exceeds its GPU
  time), on the GPU alone (the replays queued behind a GPU sleep, so the host's enqueueing is
  hidden), and the host microseconds one `replay()` call takes — and its per-kernel profile
  (launches and device time per kernel name, their sum against the step's time: the rest is
  gaps between kernels);
- the fraction of the nominal HBM roofline, counted as Grout counts it: every parameter plus
  the KV bytes read per token, over 4.8 TB/s, against the replayed step's GPU time
  (`roofline_*["step_time"]` says which time);
- beside it, a plain-PyTorch decode step on the same weight tensors (cuBLAS, SDPA, a static
  cache, the whole step in one CUDA graph: `torch_qwen3.py`), timed the same way;
- summed decode tokens/s at batch 8 and 32; prefill time at 512 and 2048 prompt tokens;
- peak GPU memory against weights + cache.
Writes the JSON (--out) and a PNG beside it. Each phase prints its wall time as it ends.
Not here: transformers' generate and a PyTorch prefill baseline.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.checkpoint import weight_bytes
from tilesafe.engine.kv_cache import cache_bytes

from torch_qwen3 import TorchQwen3Step      # beside this file

HBM_BYTES_PER_S = 4.8e12
CHECK_PROMPT, CHECK_TOKENS = 16, 8


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def prompt_ids(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"prompt_token_ids": torch.randint(1000, 100000, (n,), generator=g).tolist()}


def greedy(tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)


def check_tokens(llm: LLM, baseline: TorchQwen3Step) -> dict:
    """Engine greedy tokens vs the PyTorch baseline's on the same weights."""
    prompt = prompt_ids(CHECK_PROMPT, 7)["prompt_token_ids"]
    engine = llm.generate({"prompt_token_ids": prompt}, greedy(CHECK_TOKENS))[0].outputs[0].token_ids
    torch_tokens = baseline.greedy(prompt, CHECK_TOKENS)
    same = [a == b for a, b in zip(engine, torch_tokens)]
    first_diff = same.index(False) if False in same else None
    return {"engine": engine, "torch": torch_tokens, "agree": sum(same), "of": len(same),
            "first_difference": first_diff}


def decode_run(llm: LLM, prompt_len: int, tokens: int, batch: int = 1, reps: int = 2) -> dict:
    prompts = [prompt_ids(prompt_len, s) for s in range(batch)]
    llm.generate(prompts, greedy(tokens))                           # warm-up: compiles, captures the graphs
    prefill_s = min(timed(lambda: llm.generate(prompts, greedy(1))) for _ in range(reps))
    total_s = min(timed(lambda: llm.generate(prompts, greedy(tokens))) for _ in range(reps))
    decode_s = total_s - prefill_s
    return {"prompt": prompt_len, "tokens": tokens, "batch": batch, "prefill_s": prefill_s, "total_s": total_s,
            "decode_tokens_per_s": batch * (tokens - 1) / decode_s,
            "request_tokens_per_s": batch * tokens / total_s}


def decode_graph(llm: LLM):
    """The captured batch-1 decode step of a greedy run (None if it was not captured)."""
    step = llm.decode_steps.steps.get(1)
    if step is None:
        return None
    graphs = getattr(step, "graphs", None)       # per greedy/sampling step, where the engine has both
    return graphs.get(True) if graphs is not None else getattr(step, "graph", None)


SLEEP_CYCLES_PER_S = 2.0e9                       # torch.cuda._sleep counts GPU clock cycles (H200: ~1.98 GHz)


def replayed_step(llm: LLM, context: int, reps: int = 50) -> dict | None:
    """One replay of the batch-1 decode graph at a cache length of `context`: seconds back to
    back (CUDA events around `reps` replays), seconds on the GPU alone (the same replays
    queued behind a GPU sleep long enough to hide their host cost; `host_hidden` says whether
    it was: the GPU was still asleep when the host had queued them all), and host
    microseconds per `replay()` call."""
    graph = decode_graph(llm)
    step = llm.decode_steps.steps.get(1)
    if graph is None:
        return None
    with torch.inference_mode():                 # the step's buffers are inference tensors
        step.a.positions.fill_(context - 1)
        step.a.lens.fill_(context)
        step.a.slots.fill_(context - 1)          # slot 0: cache row = position
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    loop_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    back_to_back = start.elapsed_time(end) / 1e3 / reps
    torch.cuda._sleep(int((2 * loop_s + 0.01) * SLEEP_CYCLES_PER_S))   # the host queues everything meanwhile
    start.record()
    t0 = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    host_s = time.perf_counter() - t0
    hidden = not start.query()                   # still asleep: no replay had started yet
    end.record()
    torch.cuda.synchronize()
    return {"back_to_back_s": back_to_back, "gpu_s": start.elapsed_time(end) / 1e3 / reps,
            "host_us_per_replay": host_s / reps * 1e6, "host_hidden": hidden}


def step_profile(llm: LLM, replays: int = 5) -> dict | None:
    """Per kernel of one replayed batch-1 step: launches and device microseconds (CUPTI traces
    the kernels of a graph replay), and the step's kernel time against its wall time (the
    rest is gaps between kernels)."""
    graph = decode_graph(llm)
    if graph is None:
        return None
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kernels: dict[str, list] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in ev.name.lower():
            k = kernels.setdefault(ev.name, [0, 0.0])
            k[0] += 1
            k[1] += ev.device_time / replays if hasattr(ev, "device_time") else ev.cuda_time / replays
    per = {name: {"launches": n // replays, "us": round(us, 2)} for name, (n, us) in
           sorted(kernels.items(), key=lambda kv: -kv[1][1])}
    return {"kernels": per, "launches": sum(v["launches"] for v in per.values()),
            "kernel_us": round(sum(v["us"] for v in per.values()), 1)}


def roofline(llm: LLM, context: int, step: dict | None) -> dict:
    """Grout's count against the replayed step's GPU time (and, beside it, back to back)."""
    cfg = llm.config
    params = weight_bytes(cfg, 2)
    kv = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * context
    ideal = (params + kv) / HBM_BYTES_PER_S
    return {"param_bytes": params, "kv_bytes": kv, "ideal_step_s": ideal,
            "step_time": "gpu_s: the replayed step's GPU time (replays queued behind a GPU sleep)",
            "fraction_of_roofline": ideal / step["gpu_s"] if step else None,
            "fraction_of_roofline_back_to_back": ideal / step["back_to_back_s"] if step else None,
            "roofline_tokens_per_s": 1 / ideal}


class Phases:
    """Prints each phase's wall time as it ends (where a run's minutes go)."""

    def __init__(self, size: str):
        self.size, self.t = size, time.perf_counter()

    def done(self, what: str, result=None) -> None:
        now = time.perf_counter()
        print(f"[{self.size}] {what} ({now - self.t:.1f} s){': ' + json.dumps(result) if result else ''}",
              flush=True)
        self.t = now


def bench_size(size: str, args) -> dict:
    torch.cuda.reset_peak_memory_stats()
    phase = Phases(size)
    long = 4096 if args.long else 0
    max_len = max(max(args.prefills), long, 128) + args.tokens + 8
    max_seqs = max(args.batches)
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=max_len, max_num_seqs=max_seqs,
                          progress=False)
    torch.cuda.synchronize()
    cfg = llm.config
    out = {"size": size, "max_model_len": max_len, "max_num_seqs": max_seqs}
    phase.done("built")
    baseline = TorchQwen3Step(llm, max(128, CHECK_PROMPT) + args.tokens + 8)
    out["check"] = check_tokens(llm, baseline)
    phase.done("greedy tokens vs the PyTorch baseline", out["check"])

    out["decode_128"] = decode_run(llm, 128, args.tokens, reps=args.reps)
    context = 128 + args.tokens // 2
    step = replayed_step(llm, context)
    out["replayed_step"] = step
    out["replayed_step_s"] = step["back_to_back_s"] if step else None        # back to back, host included
    out["replayed_step_gpu_s"] = step["gpu_s"] if step else None             # GPU alone
    out["replay_host_us"] = step["host_us_per_replay"] if step else None
    out["replayed_step_tokens_per_s"] = 1 / step["back_to_back_s"] if step else None
    out["roofline_128"] = roofline(llm, context, step)
    out["torch_graph_step_s"] = torch_step = baseline.step_seconds(context)
    out["torch_graph_tokens_per_s"] = 1 / torch_step
    out["speedup_vs_torch_graph"] = torch_step / step["back_to_back_s"] if step else None
    out["speedup_vs_torch_graph_gpu"] = torch_step / step["gpu_s"] if step else None
    del baseline                                  # its cache; the weights are the engine's
    try:
        out["step_profile"] = step_profile(llm)
    except Exception as e:                        # a profiler that cannot trace must not cost the run
        out["step_profile"] = {"error": repr(e)}
    prof = out["step_profile"] or {}
    phase.done("batch 1 after 128", {k: out[k] for k in ("decode_128", "replayed_step_s", "replayed_step_gpu_s",
                                                         "replay_host_us", "torch_graph_step_s")}
               | {"fraction_of_roofline": out["roofline_128"]["fraction_of_roofline"],
                  "launches": prof.get("launches"), "kernel_us": prof.get("kernel_us")})
    if long:
        out["decode_4096"] = decode_run(llm, long, args.tokens, reps=args.reps)
        step = replayed_step(llm, long + args.tokens // 2)
        out["replayed_step_4096"] = step
        out["roofline_4096"] = roofline(llm, long + args.tokens // 2, step)
        phase.done("batch 1 after 4096", out["decode_4096"])
    out["batches"] = {}
    for b in args.batches:
        if b > 1:
            out["batches"][b] = decode_run(llm, 128, args.tokens // 2, batch=b, reps=args.reps)
            phase.done(f"batch {b}", out["batches"][b])
    out["prefill_s"] = {}
    for n in args.prefills:
        llm.generate(prompt_ids(n, 1), greedy(1))
        out["prefill_s"][n] = min(timed(lambda: llm.generate(prompt_ids(n, 1), greedy(1))) for _ in range(args.reps))
    phase.done("prefill", out["prefill_s"])
    out["memory"] = {"peak_bytes": torch.cuda.max_memory_allocated(), "weights_bytes": weight_bytes(cfg, 2),
                     "cache_bytes": cache_bytes(cfg, max_seqs, max_len, 2)}
    del llm
    torch.cuda.empty_cache()
    return out


def plot(results: dict, path: Path) -> None:
    """Batch-1 tokens/s per size (engine through generate, engine replayed step, PyTorch graph,
    the roofline) and summed tokens/s per batch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = results["runs"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    bars = [("generate (host incl.)", lambda r: r["decode_128"]["decode_tokens_per_s"]),
            ("replayed step", lambda r: r["replayed_step_tokens_per_s"] or 0),
            ("replayed step, GPU time", lambda r: 1 / r["replayed_step_gpu_s"] if r.get("replayed_step_gpu_s") else 0),
            ("PyTorch CUDA graph", lambda r: r["torch_graph_tokens_per_s"]),
            ("HBM roofline", lambda r: r["roofline_128"]["roofline_tokens_per_s"])]
    width = 0.8 / len(bars)
    for i, (name, get) in enumerate(bars):
        ax1.bar([j + i * width for j in range(len(runs))], [get(r) for r in runs], width, label=name)
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(runs))], [r["size"] for r in runs])
    ax1.set_ylabel("decode tokens/s, batch 1, prompt 128")
    ax1.legend(fontsize=8)
    for r in runs:
        pts = [(1, r["decode_128"]["decode_tokens_per_s"])] + \
            [(int(b), v["decode_tokens_per_s"]) for b, v in r["batches"].items()]
        ax2.plot(*zip(*pts), marker="o", label=r["size"])
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("batch")
    ax2.set_ylabel("summed decode tokens/s (generate)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"tilesafe Qwen3 engine, random bf16 weights, {results['gpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.6b,4b")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prefills", default="512,2048")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--long", action="store_true", help="also decode after a 4096-token prompt")
    ap.add_argument("--quick", action="store_true", help="~2 minutes: 64 tokens, batches 1 and 8, prefill 512, "
                                                         "one timed run each")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.batches, args.prefills, args.reps = 64, "1,8", "512", 1
    args.batches = [int(b) for b in str(args.batches).split(",")]
    args.prefills = [int(n) for n in str(args.prefills).split(",")]
    results = {"gpu": torch.cuda.get_device_name(), "args": {k: v for k, v in vars(args).items()}, "runs": []}
    t0 = time.perf_counter()
    for size in args.sizes.split(","):
        results["runs"].append(bench_size(size, args))
    results["wall_s"] = time.perf_counter() - t0
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        plot(results, out.with_suffix(".png"))
        print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
