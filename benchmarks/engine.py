"""Qwen3 engine throughput on one GPU, random weights of the real shapes built on the device.

    PYTHONPATH=src python benchmarks/engine.py --sizes 0.6b,4b --out benchmarks/results/h200/engine.json

Per size, through the public `LLM.generate` (host included):
- decode tokens/s at batch 1: generated tokens after the first over the decode time (the
  whole call minus a prefill-only call of the same prompt), for 256 tokens after a prompt of
  128 (and of 4096 with --long); Grout's request metric (all tokens over the whole call);
- the replayed decode step: one `ts.graph()` replay, timed on the device (CUDA events);
- the fraction of the nominal HBM roofline, counted as Grout counts it: every parameter plus
  the KV bytes read per token, over 4.8 TB/s, against the replayed step's time;
- prefill time at 512 and 2048 prompt tokens (a max_tokens=1 call);
- beside it, a plain-PyTorch decode step on the same weight tensors (cuBLAS, SDPA, a static
  cache, the whole step in one CUDA graph: `torch_qwen3.py`), timed the same way;
- summed decode tokens/s at batch 8;
- peak GPU memory against weights + cache.
Not yet here: transformers' generate and the PyTorch prefill baseline.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.checkpoint import weight_bytes

from torch_qwen3 import TorchQwen3Step      # beside this file

HBM_BYTES_PER_S = 4.8e12


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def prompt_ids(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"prompt_token_ids": torch.randint(1000, 100000, (n,), generator=g).tolist()}


def decode_run(llm: LLM, prompt_len: int, tokens: int, batch: int = 1) -> dict:
    prompts = [prompt_ids(prompt_len, s) for s in range(batch)]
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    first = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    llm.generate(prompts, params)                                   # warm-up: compiles, captures the graph
    prefill_s = min(timed(lambda: llm.generate(prompts, first)) for _ in range(2))
    total_s = min(timed(lambda: llm.generate(prompts, params)) for _ in range(2))
    decode_s = total_s - prefill_s
    return {"prompt": prompt_len, "tokens": tokens, "batch": batch, "prefill_s": prefill_s, "total_s": total_s,
            "decode_tokens_per_s": batch * (tokens - 1) / decode_s,
            "request_tokens_per_s": batch * tokens / total_s}


def replayed_step(llm: LLM, context: int, reps: int = 50) -> float | None:
    """Seconds of one replay of the batch-1 decode graph at a cache length of `context`."""
    step = llm.decode_steps.steps.get(1)
    if step is None or step.graph is None:
        return None
    step.a.positions.fill_(context - 1)
    step.a.lens.fill_(context)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        step.graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        step.graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def roofline(llm: LLM, context: int, step_s: float | None) -> dict:
    cfg = llm.config
    params = weight_bytes(cfg, 2)
    kv = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * context
    ideal = (params + kv) / HBM_BYTES_PER_S
    return {"param_bytes": params, "kv_bytes": kv, "ideal_step_s": ideal,
            "fraction_of_roofline": ideal / step_s if step_s else None,
            "roofline_tokens_per_s": 1 / ideal}


def bench_size(size: str, args) -> dict:
    torch.cuda.reset_peak_memory_stats()
    long = 4096 if args.long else 0
    max_len = max(2048, long) + args.tokens + 8
    t0 = time.perf_counter()
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=max_len, max_num_seqs=8,
                          progress=False)
    torch.cuda.synchronize()
    out = {"size": size, "build_s": time.perf_counter() - t0}
    print(f"[{size}] built in {out['build_s']:.1f} s", flush=True)
    out["decode_128"] = decode_run(llm, 128, args.tokens)
    step = replayed_step(llm, 128 + args.tokens // 2)
    out["replayed_step_s"] = step
    out["roofline_128"] = roofline(llm, 128 + args.tokens // 2, step)
    out["replayed_step_tokens_per_s"] = 1 / step if step else None
    context = 128 + args.tokens // 2
    baseline = TorchQwen3Step(llm, 128 + args.tokens + 8).step_seconds(context)
    out["torch_graph_step_s"] = baseline
    out["speedup_vs_torch_graph"] = baseline / step if step else None
    print(f"[{size}] decode@128: {out['decode_128']}\n  step {step} (torch graph {baseline}), {out['roofline_128']}",
          flush=True)
    if long:
        out["decode_4096"] = decode_run(llm, long, args.tokens)
        step = replayed_step(llm, long + args.tokens // 2)
        out["roofline_4096"] = roofline(llm, long + args.tokens // 2, step)
        print(f"[{size}] decode@4096: {out['decode_4096']} step {step}", flush=True)
    out["prefill_s"] = {}
    for n in (512, 2048):
        llm.generate(prompt_ids(n, 1), SamplingParams(temperature=0, max_tokens=1))
        out["prefill_s"][n] = min(timed(lambda: llm.generate(prompt_ids(n, 1), SamplingParams(
            temperature=0, max_tokens=1))) for _ in range(2))
    print(f"[{size}] prefill: {out['prefill_s']}", flush=True)
    out["decode_batch8"] = decode_run(llm, 128, args.tokens // 2, batch=8)
    print(f"[{size}] batch 8: {out['decode_batch8']}", flush=True)
    cfg = llm.config
    cache = 2 * cfg.num_layers * 8 * cfg.num_kv_heads * max_len * cfg.head_dim * 2
    out["memory"] = {"peak_bytes": torch.cuda.max_memory_allocated(), "weights_bytes": weight_bytes(cfg, 2),
                     "cache_bytes": cache}
    del llm
    torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.6b,4b")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--long", action="store_true", help="also decode after a 4096-token prompt")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    results = {"gpu": torch.cuda.get_device_name(), "runs": []}
    for size in args.sizes.split(","):
        results["runs"].append(bench_size(size, args))
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
