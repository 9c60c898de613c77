"""Qwen3 engine throughput on one GPU, random weights of the real shapes built on the device.

    PYTHONPATH=src python benchmarks/engine.py --out benchmarks/results/h200/engine.json        # ~200 s
    PYTHONPATH=src python benchmarks/engine.py --quick --out ...      # ~90 s: 0.6B and 4B, fewer tokens
    PYTHONPATH=src python benchmarks/engine.py --sizes 4b,32b --no-long  # any sizes; no 4096-token prompt
    PYTHONPATH=src python benchmarks/engine.py --sizes '' --load-sizes 4b   # only LLM(path)'s load time

Per size (default 4B, 32B, 0.6B, 8B, in that order: the first two carry the issue's targets),
two engines are built in turn, each with its own random weights made on the GPU (so at most one
copy of the weights is in memory): a *short* one (max_num_seqs = the largest batch, contexts of
128 + tokens) and a *long* one (one sequence, contexts up to the longest prefill).
Short engine:
- the correctness gate first (`engine_check.py`): the engine's logits over a prompt and the
  PyTorch baseline's greedy continuation against the baseline's (and transformers', at the
  --hf-sizes), first-step max abs / relative error, and teacher-forced decode agreement
  counted only where the baseline's top-2 margin exceeds the bf16 error. A failed gate refuses
  the size's speed parts (`refused` in the JSON; --ignore-check runs them anyway, marked);
- decode tokens/s at batch 1 through the public `LLM.generate` (host included): generated
  tokens after the first over the decode time (the whole call minus a prefill-only call of
  the same prompt), 256 tokens after a prompt of 128; Grout's request metric (all tokens
  over the whole call);
- the replayed decode step: one `ts.graph()` replay timed three ways — back to back on the
  device (CUDA events around many replays: host-bound if a replay's host cost exceeds its GPU
  time), on the GPU alone (the replays queued behind a GPU sleep, so the host's enqueueing is
  hidden), and the host microseconds one `replay()` call takes — and its per-kernel profile
  (`decode_profile.py`: with PDL as replayed and captured again without it, each kernel's
  time against its bytes, the gaps, and the distance to 85% of the roofline);
- the fraction of the nominal HBM roofline, counted as Grout counts it (every parameter plus
  the KV bytes read per token, over 4.8 TB/s) against the step's GPU time, and beside it the
  bytes the step actually reads (an untied embedding table is read one row a token);
- beside it, a plain-PyTorch decode step on the same weight tensors (cuBLAS, SDPA, a static
  cache, one CUDA graph: `torch_qwen3.py`) and transformers' `generate` (eager, SDPA, on the
  same tensors: `hf_qwen3.py`) at the --hf-sizes; --torch-step picks that step: `compiled_mm`
  (default, `CompiledMmTorchQwen3Step`: the fastest PyTorch step we have, 3.37 ms for the 4B on
  the H200 against the issue's 3.54 ms calibration: each layer one torch.compile'd function
  (Inductor fuses the norms, RoPE, cache write, softmax, silu*mul, residual adds), GEMMs and the
  attention's two bmm by cuBLAS, one CUDA graph), `compiled` (the same with SDPA attention),
  `plain` (`TorchQwen3Step`, eager ops: 36 kernels a layer), `lean` (`LeanTorchQwen3Step`: the
  plain math in 19 eager kernels a layer) or `compiled_glue(_mv)`;
  `benchmarks/probes/torch_step_probe.py` times them side by side);
- summed decode tokens/s at batch 8 and 32.
Long engine: prefill tokens/s at 512, 2048 and 8192 prompt tokens through `generate` (one
token) beside the PyTorch prefill (`TorchQwen3Prefill`); decode after a 4096-token prompt (--long:
the default of a full run, off with --quick or --no-long).
Each engine's peak GPU memory against its weights + cache.
Load time (--load-sizes, default 4b; `engine_load.py`): `LLM(path)` on a random checkpoint of
that size written to disk (the Hub's safetensors layout), first out of the page cache, then warm,
under a budget of its own (--load-budget-s: asking for it skips none of the other parts).
Every part runs in its own try/except (an error is recorded in the JSON, the run goes on) and
is skipped (marked `skipped`) when its estimated time would pass --budget-s. Writes the JSON
(--out) and a PNG beside it; `benchmarks/readme_table.py --engine` makes the README rows.
"""
from __future__ import annotations

import argparse
import gc
import json
import time
import traceback
from pathlib import Path

import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.checkpoint import weight_bytes
from tilesafe.engine.kv_cache import cache_bytes
from tilesafe.engine.random_checkpoint import qwen3_config

import decode_profile                                       # beside this file
import engine_check
import engine_load
from torch_qwen3 import STEPS as TORCH_STEPS, TorchQwen3Prefill

HBM_BYTES_PER_S = 4.8e12
CHECK_PROMPT, CHECK_TOKENS = 16, 24


def sync() -> None:
    """Wait for the GPU (nothing on a CPU-only machine: --device cpu is a smoke run of the script)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def prompt_ids(n: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"prompt_token_ids": torch.randint(1000, 100000, (n,), generator=g).tolist()}


def greedy(tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)


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


def step_profile(llm: LLM, context: int, ideal_s: float | None, step_s: float | None) -> dict | None:
    """The per-kernel profile of one replayed batch-1 step (`decode_profile.py`): traced as the
    engine replays it (PDL) and captured again without PDL (each kernel's own time and the gaps
    between kernels), each kernel's bytes and GB/s, summed into the GEMVs at their achieved
    rate, the attention, the small kernels and the gaps, and the distance to 85% of the
    roofline. `kernels` keeps the older per-name table (launches, µs under PDL)."""
    if decode_graph(llm) is None:
        return None
    p = decode_profile.profile_step(llm, context, ideal_s or 0.0, step_s)
    if p is None:
        return None
    decode_profile.print_profile(f"{llm.config.num_layers} layers", p)
    main = p.get("pdl") or p["plain"]
    p["kernels"] = {n: {"launches": v["launches"], "us": v["us"]} for n, v in main["by_kernel"].items()}
    p["launches"], p["kernel_us"] = main["launches"], main["kernel_us"]
    return p


def kv_bytes_per_token(cfg, itemsize: int = 2) -> int:
    """Keys and values of one cached token, every layer."""
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize


def roofline_numbers(param_bytes: int, kv_token_bytes: int, context: int, step_s: float | None,
                     embed_bytes: int = 0, hbm_bytes_per_s: float = HBM_BYTES_PER_S) -> dict:
    """Grout's count (every parameter plus the KV bytes of `context` cached tokens, over the
    nominal bandwidth) against a step time, and the bytes a step actually reads: an untied
    embedding table (`embed_bytes`) is read one row a token, not whole."""
    kv = kv_token_bytes * context
    ideal = (param_bytes + kv) / hbm_bytes_per_s
    read = param_bytes - embed_bytes + kv
    return {"param_bytes": param_bytes, "kv_bytes": kv, "ideal_step_s": ideal, "bytes_read": read,
            "roofline_tokens_per_s": 1 / ideal,
            "fraction_of_roofline": ideal / step_s if step_s else None,
            "achieved_bytes_per_s": read / step_s if step_s else None}


def roofline(llm: LLM, context: int, step: dict | None) -> dict:
    """roofline_numbers of the engine's model against the replayed step's GPU time."""
    cfg = llm.config
    embed = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size * 2
    out = roofline_numbers(weight_bytes(cfg, 2), kv_bytes_per_token(cfg), context,
                           step["gpu_s"] if step else None, embed)
    out["step_time"] = "gpu_s: the replayed step's GPU time (replays queued behind a GPU sleep)"
    out["fraction_of_roofline_back_to_back"] = out["ideal_step_s"] / step["back_to_back_s"] if step else None
    return out


class Parts:
    """Runs the benchmark's parts against one wall-clock budget: each in its own try/except
    (an error is recorded as {"error": ...} and the run goes on), each skipped (recorded as
    {"skipped": ...}) when its estimated seconds would pass the budget; prints each part's
    wall time as it ends."""

    def __init__(self, budget_s: float):
        self.t0, self.budget_s = time.perf_counter(), budget_s

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)

    def run(self, out: dict, key: str, estimate_s: float, fn, label: str = ""):
        if estimate_s > self.left():
            out[key] = {"skipped": f"estimated {estimate_s:.0f} s, {max(self.left(), 0):.0f} s of the budget left"}
            print(f"[{label}] {key}: skipped ({out[key]['skipped']})", flush=True)
            return None
        t = time.perf_counter()
        try:
            out[key] = fn()
        except Exception as e:                    # one failed part must not cost the others
            traceback.print_exc()
            out[key] = {"error": f"{type(e).__name__}: {e}"[:800]}
            sync()
        summary = json.dumps(out[key], default=str)
        print(f"[{label}] {key} ({time.perf_counter() - t:.1f} s): "
              f"{summary[:400] + ' ...' if len(summary) > 400 else summary}", flush=True)
        return None if isinstance(out[key], dict) and ("error" in out[key] or "skipped" in out[key]) else out[key]


def step_estimate_s(cfg) -> float:
    """A guess of one decode step's seconds (the budget's estimates): the weights at 3 TB/s."""
    return weight_bytes(cfg, 2) / 3.0e12 + 1.0e-3


def build(size: str, max_len: int, max_seqs: int, device: str) -> LLM:
    gc.collect()                                  # the last engine's weights, before new ones
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    llm = LLM.from_random(size, device=device, dtype="bfloat16", max_model_len=max_len, max_num_seqs=max_seqs,
                          progress=False)
    sync()
    return llm


def allocated_now() -> int | None:
    """Bytes torch holds on the GPU after a collection (before a build: a leaked engine shows here)."""
    gc.collect()
    return torch.cuda.memory_allocated() if torch.cuda.is_available() else None


def memory(llm: LLM, max_seqs: int, max_len: int) -> dict:
    return {"peak_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
            "weights_bytes": weight_bytes(llm.config, 2),
            "cache_bytes": cache_bytes(llm.config, max_seqs, max_len, 2)}


def hf_decode(llm: LLM, size: str, tokens: int) -> dict:
    """transformers' greedy `generate` on the engine's tensors, batch 1 after a prompt of 128:
    decode tokens/s as the engine's (the whole call minus a one-token call)."""
    from hf_qwen3 import HFQwen3
    hf = HFQwen3(llm, qwen3_config(size))
    prompt = prompt_ids(128, 0)["prompt_token_ids"]
    hf.generate(prompt, 2)                                          # warm-up
    first = timed(lambda: hf.generate(prompt, 1))
    total = timed(lambda: hf.generate(prompt, tokens))
    return {"prompt": 128, "tokens": tokens, "prefill_s": first, "total_s": total,
            "decode_tokens_per_s": (tokens - 1) / (total - first), "request_tokens_per_s": tokens / total,
            "how": "eager, SDPA, dynamic cache, on the engine's weight tensors"}


def bench_short(size: str, args, parts: Parts, out: dict) -> None:
    """The short engine: the gate, batch-1 decode, the replayed step, the baselines, batches."""
    tag = f"{size} short"
    max_len, max_seqs = 128 + args.tokens + CHECK_PROMPT + CHECK_TOKENS + 8, max(args.batches)
    out["short_engine"] = {"max_model_len": max_len, "max_num_seqs": max_seqs, "allocated_before": allocated_now()}
    llm = parts.run(out, "build_short", 5 + weight_bytes(qwen3_config_of(size), 2) / 20e9,
                    lambda: build(size, max_len, max_seqs, args.device), tag)
    if llm is None:
        return
    out["build_short"] = "ok"                      # not the LLM: the JSON holds no reference to it
    cfg, est = llm.config, step_estimate_s(llm.config)
    baseline = TORCH_STEPS[args.torch_step](llm, max_len)
    hf = None
    if size in args.hf_sizes:
        try:
            from hf_qwen3 import HFQwen3
            hf = HFQwen3(llm, qwen3_config(size))
        except Exception as e:
            out["check_transformers_error"] = f"{type(e).__name__}: {e}"[:800]
    prompt = prompt_ids(CHECK_PROMPT, 7)["prompt_token_ids"]
    check = parts.run(out, "check", 10 + 6 * CHECK_TOKENS * est,
                      lambda: engine_check.check(llm, baseline, prompt, CHECK_TOKENS, hf), tag)
    del hf
    if check is not None and not check["passed"] and not args.ignore_check:
        out["refused"] = f"the correctness gate failed: {check['why']}; no speed is reported for {size}"
        print(f"[{tag}] {out['refused']}", flush=True)
        return
    if check is None:
        out["unchecked"] = "the correctness gate did not run (see check); speeds below are unchecked"
    elif not check["passed"]:
        out["unchecked"] = f"--ignore-check: the gate failed ({check['why']})"

    def batch1() -> dict:
        r = {"decode_128": decode_run(llm, 128, args.tokens, reps=args.reps)}
        context = 128 + args.tokens // 2
        step = replayed_step(llm, context)
        r["replayed_step"] = step
        r["roofline_128"] = roofline(llm, context, step)
        if llm.device.startswith("cuda"):         # CUDA graphs: none on a CPU smoke run
            torch_step = baseline.step_seconds(context)
            r["torch_graph"] = {"step": args.torch_step, "step_s": torch_step, "tokens_per_s": 1 / torch_step,
                                "speedup_gpu": torch_step / step["gpu_s"] if step else None,
                                "speedup_back_to_back": torch_step / step["back_to_back_s"] if step else None}
        return r
    # decode_run makes reps + 1 calls of `tokens` (and reps prefill-only ones); 150 replays after
    r = parts.run(out, "batch1", 10 + (args.reps + 1) * args.tokens * est * 1.3 + 150 * est, batch1, tag)
    if r is not None:                             # its keys at the top level (readme_table, plot)
        out.update(out.pop("batch1"))
    del baseline
    parts.run(out, "step_profile", 10 + 20 * est,
              lambda: step_profile(llm, 128 + args.tokens // 2, _get(out, "roofline_128", "ideal_step_s") or None,
                                   _get(out, "replayed_step", "gpu_s") or None), tag)
    if size in args.hf_sizes:
        hf_est = 10 + 2.5 * args.hf_tokens * (est + cfg.num_layers * 400e-6)
        parts.run(out, "transformers", hf_est, lambda: hf_decode(llm, size, args.hf_tokens), tag)
    out["batches"] = {}
    for b in args.batches:
        if b > 1:
            tokens = args.tokens // 2
            parts.run(out["batches"], str(b), 5 + (args.reps + 1) * tokens * est * (1 + b / 16),
                      lambda b=b, tokens=tokens: decode_run(llm, 128, tokens, batch=b, reps=args.reps), tag)
    out["memory_short"] = memory(llm, max_seqs, max_len)
    del llm


def bench_long(size: str, args, parts: Parts, out: dict) -> None:
    """The long engine: prefill beside the PyTorch prefill, and decode after 4096 (--long)."""
    tag = f"{size} long"
    long = 4096 if args.long else 0
    max_len = max(max(args.prefills, default=0), long) + args.tokens + 8
    out["long_engine"] = {"max_model_len": max_len, "max_num_seqs": 1, "allocated_before": allocated_now()}
    cfg0 = qwen3_config_of(size)
    prefill_est = sum(3 * (args.reps + 1) * (2 * weight_bytes(cfg0, 1) * n / 300e12 + 0.05)
                      for n in args.prefills)
    if prefill_est + (0 if not long else 3 * args.tokens * step_estimate_s(cfg0)) > parts.left():
        out["prefill"] = {"skipped": f"estimated {prefill_est:.0f} s, {max(parts.left(), 0):.0f} s left"}
        print(f"[{tag}] skipped: {out['prefill']['skipped']}", flush=True)
        return
    llm = parts.run(out, "build_long", 5 + weight_bytes(cfg0, 2) / 20e9, lambda: build(size, max_len, 1, args.device), tag)
    if llm is None:
        return
    out["build_long"] = "ok"
    torch_prefill = TorchQwen3Prefill(llm, max_len)
    out["prefill"] = {}
    for n in args.prefills:
        def one(n=n) -> dict:
            def engine_s() -> float:
                llm.generate(prompt_ids(n, 1), greedy(1))             # warm-up (compiles; captures a bucket graph)
                return min(timed(lambda: llm.generate(prompt_ids(n, 1), greedy(1))) for _ in range(args.reps))
            eng = engine_s()
            base = torch_prefill.seconds(n, args.reps)
            r = {"tokens": n, "engine_s": eng, "engine_tokens_per_s": n / eng, "torch_s": base,
                 "torch_tokens_per_s": n / base, "engine_over_torch_time": eng / base,
                 "prefill_graphs": getattr(llm, "prefill_graphs", None) is not None}
            if r["prefill_graphs"]:                                   # the eager prefill beside the graph one
                graphs, llm.prefill_graphs = llm.prefill_graphs, None
                try:
                    r["engine_eager_s"] = engine_s()
                finally:
                    llm.prefill_graphs = graphs
            return r
        parts.run(out["prefill"], str(n), 3 * (args.reps + 1) * (2 * weight_bytes(cfg0, 1) * n / 300e12 + 0.05),
                  one, tag)
    del torch_prefill
    if long:
        def after_long() -> dict:
            r = {"decode_4096": decode_run(llm, long, args.tokens, reps=args.reps)}
            step = replayed_step(llm, long + args.tokens // 2)
            r["replayed_step_4096"] = step
            r["roofline_4096"] = roofline(llm, long + args.tokens // 2, step)
            return r
        r = parts.run(out, "long", 10 + (args.reps + 1) * args.tokens * step_estimate_s(cfg0) * 1.5,
                      after_long, tag)
        if r is not None:
            out.update(out.pop("long"))
    out["memory_long"] = memory(llm, 1, max_len)
    del llm


def qwen3_config_of(size: str):
    from tilesafe.engine.config import Qwen3Config
    return Qwen3Config.from_dict(qwen3_config(size), f"the {size} Qwen3 config")


def _bench_part(name: str, bench, size: str, args, parts: Parts, out: dict) -> None:
    """One part of a size's benchmark: a failure is recorded as out[f"{name}_error"] (the other part
    still runs), and its engine's memory is freed before the next part loads one."""
    try:
        bench(size, args, parts, out)
    except Exception as e:
        traceback.print_exc()
        out[f"{name}_error"] = f"{type(e).__name__}: {e}"[:800]
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def bench_size(size: str, args, parts: Parts) -> dict:
    out = {"size": size}
    _bench_part("short", bench_short, size, args, parts, out)
    if "refused" not in out:
        _bench_part("long", bench_long, size, args, parts, out)
    # compatibility with older readers: the replayed step's flat keys
    step = out.get("replayed_step")
    if isinstance(step, dict) and "gpu_s" in step:
        out["replayed_step_s"], out["replayed_step_gpu_s"] = step["back_to_back_s"], step["gpu_s"]
        out["replayed_step_tokens_per_s"] = 1 / step["back_to_back_s"]
    return out


def _get(r: dict, *keys, default=0.0):
    """r[k0][k1]... or `default` where a part is missing, skipped or failed."""
    for k in keys:
        if not isinstance(r, dict) or k not in r:
            return default
        r = r[k]
    return r if isinstance(r, (int, float)) and r is not None else default


def plot(results: dict, path: Path) -> None:
    """Batch-1 tokens/s per size (engine through generate, its replayed step back to back and on
    the GPU, the PyTorch graph, transformers, the roofline), summed tokens/s per batch, and
    prefill tokens/s against the PyTorch prefill."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [r for r in results["runs"] if "refused" not in r]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8))
    bars = [("generate (host incl.)", lambda r: _get(r, "decode_128", "decode_tokens_per_s")),
            ("replayed step", lambda r: 1 / s if (s := _get(r, "replayed_step", "back_to_back_s")) else 0),
            ("replayed step, GPU time", lambda r: 1 / s if (s := _get(r, "replayed_step", "gpu_s")) else 0),
            ("PyTorch CUDA graph", lambda r: _get(r, "torch_graph", "tokens_per_s")),
            ("transformers generate", lambda r: _get(r, "transformers", "decode_tokens_per_s")),
            ("HBM roofline", lambda r: _get(r, "roofline_128", "roofline_tokens_per_s"))]
    width = 0.8 / len(bars)
    for i, (name, get) in enumerate(bars):
        ax1.bar([j + i * width for j in range(len(runs))], [get(r) for r in runs], width, label=name)
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(runs))], [r["size"] for r in runs])
    ax1.set_yscale("log")
    ax1.set_ylabel("decode tokens/s, batch 1, prompt 128")
    ax1.legend(fontsize=7)
    for r in runs:
        pts = [(1, _get(r, "decode_128", "decode_tokens_per_s"))] + \
            [(int(b), _get(v, "decode_tokens_per_s")) for b, v in r.get("batches", {}).items()]
        pts = [p for p in pts if p[1]]
        if pts:
            ax2.plot(*zip(*pts), marker="o", label=r["size"])
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("batch")
    ax2.set_ylabel("summed decode tokens/s (generate)")
    ax2.legend(fontsize=8)
    for r in runs:
        pre = {int(n): v for n, v in r.get("prefill", {}).items() if isinstance(v, dict) and "engine_s" in v}
        if pre:
            n = sorted(pre)
            line, = ax3.plot(n, [pre[k]["engine_tokens_per_s"] for k in n], marker="o", label=f"{r['size']} tilesafe")
            ax3.plot(n, [pre[k]["torch_tokens_per_s"] for k in n], marker="x", linestyle="--",
                     color=line.get_color(), label=f"{r['size']} PyTorch")
    ax3.set_xscale("log", base=2)
    ax3.set_xlabel("prompt tokens")
    ax3.set_ylabel("prefill tokens/s")
    ax3.legend(fontsize=7)
    fig.suptitle(f"tilesafe Qwen3 engine, random bf16 weights, {results['gpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


DEFAULT_SIZES = "4b,32b,0.6b,8b"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated Qwen3 sizes (default {DEFAULT_SIZES})")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prefills", default="512,2048,8192")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--hf-sizes", default="0.6b,4b,8b",
                    help="sizes where transformers' generate runs too (it fits up to 8B; '' none)")
    ap.add_argument("--hf-tokens", type=int, default=64)
    ap.add_argument("--long", action=argparse.BooleanOptionalAction, default=None,
                    help="also decode after a 4096-token prompt (default: on, off with --quick)")
    ap.add_argument("--budget-s", type=float, default=200.0, help="skip parts that would run past this")
    ap.add_argument("--ignore-check", action="store_true", help="report speeds even where the gate failed (marked)")
    ap.add_argument("--quick", action="store_true", help="~90 s: 0.6B and 4B, 64 tokens, batches 1 and 8, "
                                                         "prefill 512 and 2048, one timed run each")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (size tiny)")
    ap.add_argument("--load-sizes", default=None, help="sizes whose LLM(path) load time is measured on a checkpoint "
                                                       "written to disk (engine_load.py; default 4b, '' none)")
    ap.add_argument("--load-budget-s", type=float, default=90.0, help="the load parts' own time budget")
    ap.add_argument("--ckpt-dir", default=None, help="where the load-time checkpoint is written (default: the "
                                                     "temporary folder; deleted after)")
    ap.add_argument("--torch-step", choices=sorted(TORCH_STEPS), default="compiled_mm",
                    help="the PyTorch baseline's decode step: compiled_mm (default: each layer's glue fused by "
                         "torch.compile, GEMMs and attention's bmm by cuBLAS: CompiledMmTorchQwen3Step), compiled "
                         "(the same with SDPA), plain (TorchQwen3Step, eager ops), lean (the plain math in fewer "
                         "kernels, LeanTorchQwen3Step), compiled_glue (only the glue compiled; compiled_glue_mv: "
                         "its GEMVs as torch.mv); it is also the correctness gate's reference")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    if args.quick:
        args.tokens, args.batches, args.prefills, args.reps, args.hf_tokens = 64, "1,8", "512,2048", 1, 32
        if args.sizes == DEFAULT_SIZES:
            args.sizes = "0.6b,4b"
        if args.budget_s == 200.0:
            args.budget_s = 90.0
    if args.long is None:                          # the second prompt length: a full run measures it
        args.long = not args.quick
    if args.load_sizes is None:                    # a quick or CPU run writes no checkpoint unless asked
        args.load_sizes = "" if args.quick or args.device == "cpu" else "4b"
    args.load_sizes = [s for s in args.load_sizes.split(",") if s]
    args.sizes = [s for s in args.sizes.split(",") if s]
    args.hf_sizes = [s for s in args.hf_sizes.split(",") if s]
    args.batches = [int(b) for b in str(args.batches).split(",") if b]
    args.prefills = [int(n) for n in str(args.prefills).split(",") if n]
    return args


def main() -> None:
    args = parse_args()
    results = {"gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "args": dict(vars(args)), "runs": []}
    parts = Parts(args.budget_s)
    for size in args.sizes:
        results["runs"].append(bench_size(size, args, parts))
    results["load"] = {}
    loads = Parts(args.load_budget_s)             # a budget of its own: adding it skips no speed part
    for size in args.load_sizes:                  # LLM(path) on a checkpoint written to disk
        loads.run(results["load"], size, engine_load.estimate_s(size),
                  lambda size=size: engine_load.load_time(size, args.device, args.ckpt_dir), f"{size} load")
    results["wall_s"] = time.perf_counter() - parts.t0
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        try:
            plot(results, out.with_suffix(".png"))
            print(f"wrote {out} and {out.with_suffix('.png')}")
        except Exception:
            traceback.print_exc()
            print(f"wrote {out} (the plot failed)")


if __name__ == "__main__":
    main()
