"""Batch-1 decode of the Qwen3 engine at tensor_parallel_size 1 and 2 (needs two GPUs).

    PYTHONPATH=src python benchmarks/tp_decode.py --sizes 8b,14b,32b --out benchmarks/results/h200x2/tp_decode.json
    PYTHONPATH=src python benchmarks/tp_decode.py --quick       # 8b only, 64 tokens: a few minutes

Random weights of the real shapes are built on the GPUs (`LLM.from_random`, each rank
making only its slices), one model at a time. Per size and TP size, in one run:
- decode tokens/s at batch 1 through the public `LLM.generate` (host included): generated
  tokens after the first over the decode time (the whole call minus a prefill-only call of
  the same prompt), for --tokens tokens after a prompt of --prompt;
- the bytes each GPU reads per token (its weights + its KV heads over the context) and the
  fraction of the roofline: the nominal HBM bandwidth (4.8 TB/s) of every GPU in use, so
  the TP=2 roofline is twice TP=1's for the same model;
- the all-reduce time per step: a (1, hidden) bf16 all-reduce over two GPUs timed on its own
  (two processes of this script, NCCL, CUDA events over many calls captured in a CUDA graph as
  the decode step runs them, and eagerly), times the decode step's 2 x layers + 1
  all-reduces, plus one all-gather of the (1, vocab / 2) logits.
Target (issue 20): Qwen3-32B at TP=2 >= 110 tokens/s.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import socket
import time
from pathlib import Path

import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.random_checkpoint import qwen3_config

HBM_BYTES_PER_S = 4.8e12


def greedy(tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)


def prompt_ids(n: int) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"prompt_token_ids": torch.randint(1000, 100000, (n,), generator=g).tolist()}


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def decode(size: str, tp: int, prompt: int, tokens: int, reps: int) -> dict:
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=prompt + tokens + 16,
                          max_num_seqs=1, progress=False, tensor_parallel_size=tp)
    try:
        p = [prompt_ids(prompt)]
        first = llm.generate(p, greedy(tokens))[0].outputs[0].token_ids     # warm-up: compile, capture
        prefill_s = min(timed(lambda: llm.generate(p, greedy(1))) for _ in range(reps))
        total_s = min(timed(lambda: llm.generate(p, greedy(tokens))) for _ in range(reps))
        per_rank = llm.weight_bytes_per_rank()
        cfg = llm.config
    finally:
        llm.close()
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    context = prompt + tokens // 2                                           # the mean context of a decode step
    kv_heads = max(cfg.num_kv_heads // tp, 1)
    kv = 2 * cfg.num_layers * kv_heads * cfg.head_dim * 2 * context          # per GPU, bf16
    tokens_per_s = (tokens - 1) / (total_s - prefill_s)
    roofline = HBM_BYTES_PER_S / (max(per_rank) + kv)        # every GPU reads its share at once
    return {"size": size, "tp": tp, "prompt": prompt, "tokens": tokens, "prefill_s": prefill_s, "total_s": total_s,
            "decode_tokens_per_s": tokens_per_s, "weight_bytes_per_gpu": per_rank, "kv_bytes_per_gpu": kv,
            "roofline_tokens_per_s": roofline, "fraction_of_roofline": tokens_per_s / roofline,
            "first_tokens": first[:8]}


# -- the all-reduce on its own: two processes of this script -----------------------------------

def _allreduce_rank(rank: int, port: int, hidden: int, vocab_half: int, iters: int, out) -> None:
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    x = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(1, vocab_half, device="cuda", dtype=torch.bfloat16)
    gathered = torch.empty(2, vocab_half, device="cuda", dtype=torch.bfloat16)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    result = {}
    for name, op in (("all_reduce", lambda: dist.all_reduce(x)), ("all_gather", lambda: gather(gathered, logits))):
        for _ in range(20):
            op()
        torch.cuda.synchronize()
        dist.barrier()
        result[name + "_eager_us"] = _per_call_us(op, iters)
        # As the decode step runs them: captured in a CUDA graph (100 calls), timed over replays.
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(100):
                    op()
            torch.cuda.synchronize()
            dist.barrier()
            result[name + "_us"] = _per_call_us(graph.replay, iters // 100) / 100
        except RuntimeError as e:       # capture unsupported here: the eager time stands in
            result[name + "_capture_error"] = str(e).splitlines()[0]
            result[name + "_us"] = result[name + "_eager_us"]
    if rank == 0:
        out.put(result)
    dist.barrier()
    dist.destroy_process_group()


def _per_call_us(op, n: int) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        op()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / n


def collective_times(hidden: int, vocab: int, iters: int = 2000) -> dict:
    """Eager per-call microseconds of the decode step's collectives at batch 1 (two GPUs)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_allreduce_rank, args=(r, port, hidden, vocab // 2, iters, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=600)
    for p in procs:
        p.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8b,14b,32b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="8b only, 64 tokens, one repetition")
    ap.add_argument("--out", default="benchmarks/results/h200x2/tp_decode.json")
    args = ap.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit("tp_decode.py needs two GPUs (nvidia-h200-x2)")
    sizes = ["8b"] if args.quick else args.sizes.split(",")
    tokens, reps = (64, 1) if args.quick else (args.tokens, args.reps)
    results = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
               "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}, "sizes": {}}
    for size in sizes:
        raw = qwen3_config(size)
        t0 = time.perf_counter()
        coll = collective_times(raw["hidden_size"], raw["vocab_size"])
        per_step_us = (2 * raw["num_hidden_layers"] + 1) * coll["all_reduce_us"] + coll["all_gather_us"]
        runs = {}
        for tp in (1, 2):
            runs[f"tp{tp}"] = decode(size, tp, args.prompt, tokens, reps)
            r = runs[f"tp{tp}"]
            print(f"{size} TP={tp}: {r['decode_tokens_per_s']:.1f} tokens/s, {r['fraction_of_roofline']:.1%} of "
                  f"{tp} GPU(s)' roofline ({r['roofline_tokens_per_s']:.0f} tokens/s)  "
                  f"[{time.perf_counter() - t0:.0f} s]", flush=True)
        step_s = 1 / runs["tp2"]["decode_tokens_per_s"]
        speedup = runs["tp2"]["decode_tokens_per_s"] / runs["tp1"]["decode_tokens_per_s"]
        results["sizes"][size] = {**runs, "collectives": coll, "collectives_per_step_us": per_step_us,
                                  "collectives_fraction_of_tp2_step": per_step_us * 1e-6 / step_s,
                                  "speedup_tp2": speedup,
                                  "same_first_tokens": runs["tp1"]["first_tokens"] == runs["tp2"]["first_tokens"]}
        print(f"{size}: collectives {per_step_us:.0f} us per TP=2 step "
              f"({results['sizes'][size]['collectives_fraction_of_tp2_step']:.1%} of it), TP=2 speed-up "
              f"{results['sizes'][size]['speedup_tp2']:.2f}x", flush=True)
    if "32b" in results["sizes"]:
        results["target_32b_tp2_tokens_per_s"] = 110
        results["target_met"] = results["sizes"]["32b"]["tp2"]["decode_tokens_per_s"] >= 110
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
