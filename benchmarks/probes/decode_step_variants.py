"""Probe: the engine's batch-1 decode step with each candidate change, side by side, and the
per-kernel profile (`benchmarks/decode_profile.py`) of the default and the fastest variant.

For each size, one LLM (random bf16 weights, the short engine's max_model_len of
`benchmarks/engine.py --quick`: contexts of 128 + 32 at the profile) runs a greedy prompt of
128 tokens with each variant's switches set, the decode graphs captured afresh; then:
GPU ms per replayed step (the replays queued behind a GPU sleep), whether its 8 greedy tokens
equal the default's, and the largest difference of their log-probabilities (a fused norm that
rounds differently moves them by ~1e-3; a wrong kernel by far more). Variants:
  default      the engine as committed
  apart        NORM_PROLOGUE False: every norm its own kernel
  late_norm    NORM_PROLOGUE True: each RMSNorm the prologue of the GEMV after it, in the late
               form (linear_fusions.NORM_LATE: statistics gathered in the weight loop, no pass)
  late_qkv / late_gu / late_head   the late prologue before that GEMV only
  pre_norm     NORM_PROLOGUE with the pass over x before the loop (what lost at 4B in s15)
  silu_apart   SILU_PROLOGUE False: silu_mul its own kernel, the down GEMV plain (+ residual)
  one_split / two_split   decode attention in one / at most two splits
  one_kernel   the splits combined by the last block of each KV head (no combine launch)
  late+split   late_norm and one_split
  early        matmul.GEMV_EARLY on: each one-row GEMV over the (frozen) weights in its PREFETCH loop, whose
               first weight tile loads before the PDL wait (session 18 round 1: 4B 2.858 against 2.619 ms)
  pf_waits     early's PREFETCH loops, but every launch waiting first (runtime early reads off)
  early2       early, the fused GEMVs (qkv, o, down) two weight tiles ahead (both before the wait)
  peel         matmul.GEMV_EARLY_PEEL: the fused GEMVs (qkv, o, down) load weight tile 0 before their tuned,
               pipelined loop, so before the PDL wait (no PREFETCH loop)
  early_small  the early form for the 4B qkv, o and down GEMVs only (gate/up as tuned)
  o_split2 / down_split2   the o / down projection split over K in two (partials + a sum kernel)
  o_narrow     the o projection in 2-column tiles (1280 blocks)
  nrk_stagger  norm_rope_kv_write's three walks on blocks of their own (norm_rope_kv.STAGGER_WALKS)
  nrk_h2/4/8   norm_rope_kv_write with 2, 4 or 8 heads a tile at one token (default 1)
DEC_PROFILE=a,b names the variants to profile (default: the default and the fastest).
Every case catches its own errors; variants stop starting past BUDGET_S.
    PYTHONPATH=src python3 benchmarks/probes/decode_step_variants.py "$OUT/dec/variants.json" 4b,0.6b
(argv[3]: the variants, comma-separated; argv[4]: "profile" sizes, default the first size)
"""
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))       # benchmarks/: decode_profile

import decode_profile  # noqa: E402
from queued_ms import queued_ms  # noqa: E402  (benchmarks/probes/, the script's folder)

import tilesafe.kernels as tk  # noqa: E402
from tilesafe.engine import LLM, SamplingParams  # noqa: E402

T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("DEC_BUDGET_S", "80"))
MODEL = importlib.import_module("tilesafe.engine.model")
FUSIONS = importlib.import_module("tilesafe.kernels.linear_fusions")
AM = importlib.import_module("tilesafe.kernels.attention_model")
MAX_LEN = 128 + 64 + 16 + 24 + 8            # engine.py --quick's short engine
CONTEXT = 128 + 32
PK = importlib.import_module("tilesafe.kernels.paged_kv")
_PAGED_CONFIG = PK._paged_config


MM = importlib.import_module("tilesafe.kernels.matmul")
NRK = importlib.import_module("tilesafe.kernels.norm_rope_kv")
RK = importlib.import_module("tilesafe.runtime.kernel")
_SKINNY_CONFIG = MM.skinny_config


def _with_config(change):
    """skinny_config returning the tuned config updated by change(n, k) for one-row GEMVs."""
    def config(dtype, m, n, k, cfg, run=None):
        c = _SKINNY_CONFIG(dtype, m, n, k, cfg, run)
        return {**c, **change(n, k)} if m == 1 else c
    return config


def _no_early_reads(kernel, bound, sched):
    """runtime/kernel.py's early_reads, off: every launch waits before its first load."""
    return sched


SMALL = {(6144, 2560), (2560, 4096), (2560, 9728)}      # Qwen3-4B's qkv, o and down weights (N, K)
_PREFETCH_SMALL = _with_config(lambda n, k: {"prefetch": True} if (n, k) in SMALL else {})
SPLIT_O = _with_config(lambda n, k: {"split_k": 2} if (n, k) == (2560, 4096) else {})
SPLIT_DOWN = _with_config(lambda n, k: {"split_k": 2} if (n, k) == (2560, 9728) else {})
O_NARROW = _with_config(lambda n, k: {"block_n": 2, "block_k": 2048} if (n, k) == (2560, 4096) else {})


def _one_kernel_config(fn, config):
    """paged_decode_attention's switches with the combine in the last block (`one_kernel`)."""
    return {**_PAGED_CONFIG(fn, config), "one_kernel": True}


VARIANTS = {
    "default": {},
    "apart": {(MODEL, "NORM_PROLOGUE"): False},
    "late_norm": {(MODEL, "NORM_PROLOGUE"): True, (FUSIONS, "LATE_NORM"): True},
    "late_qkv": {(MODEL, "NORM_PROLOGUE"): frozenset({"qkv"})},
    "late_gu": {(MODEL, "NORM_PROLOGUE"): frozenset({"gate_up"})},
    "late_head": {(MODEL, "NORM_PROLOGUE"): frozenset({"lm_head"})},
    "pre_norm": {(MODEL, "NORM_PROLOGUE"): True, (FUSIONS, "LATE_NORM"): False},
    "silu_apart": {(MODEL, "SILU_PROLOGUE"): False},
    "one_split": {(AM, "PAGED_MAX_SPLITS"): 1},
    "two_split": {(AM, "PAGED_MAX_SPLITS"): 2},
    "one_kernel": {(PK, "_paged_config"): _one_kernel_config},
    "late+split": {(MODEL, "NORM_PROLOGUE"): True, (FUSIONS, "LATE_NORM"): True, (AM, "PAGED_MAX_SPLITS"): 1},
    "early": {(MM, "GEMV_EARLY"): True},
    "pf_waits": {(MM, "GEMV_EARLY"): True, (RK, "early_reads"): _no_early_reads},
    "early2": {(MM, "GEMV_EARLY"): True, (MM, "GEMV_EARLY_TILES"): 2},
    "peel": {(MM, "GEMV_EARLY_PEEL"): True},
    "early_small": {(MM, "skinny_config"): _PREFETCH_SMALL, (FUSIONS, "skinny_config"): _PREFETCH_SMALL},
    "o_split2": {(MM, "skinny_config"): SPLIT_O, (FUSIONS, "skinny_config"): SPLIT_O},
    "down_split2": {(MM, "skinny_config"): SPLIT_DOWN, (FUSIONS, "skinny_config"): SPLIT_DOWN},
    "o_narrow": {(MM, "skinny_config"): O_NARROW, (FUSIONS, "skinny_config"): O_NARROW},
    "nrk_stagger": {(NRK, "STAGGER_WALKS"): True},
    "nrk_h2": {(NRK, "ONE_TOKEN_HEADS"): 2},
    "nrk_h4": {(NRK, "ONE_TOKEN_HEADS"): 4},
    "nrk_h8": {(NRK, "ONE_TOKEN_HEADS"): 8},
}
PROFILE = [v for v in os.environ.get("DEC_PROFILE", "").split(",") if v]   # variants to profile (else default
                                                                             # and the fastest)


def left() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


def reset_plans() -> None:
    """Call plans keep a call's launch arguments (a prologue's kind among them): start over."""
    for name in dir(tk):
        plans = getattr(getattr(tk, name), "plans", None)
        if plans is not None:
            plans.plans.clear()


class Switches:
    def __init__(self, changes: dict):
        self.changes, self.saved = changes, {}

    def __enter__(self):
        for (mod, name), value in self.changes.items():
            self.saved[(mod, name)] = getattr(mod, name)
            setattr(mod, name, value)
        reset_plans()

    def __exit__(self, *exc):
        for (mod, name), value in self.saved.items():
            setattr(mod, name, value)
        reset_plans()


def gpu_ms(replay, n=30) -> float:
    return queued_ms(replay, n, warm=3, sleep_cycles=300_000_000)


def ideal_s(llm) -> float:
    from tilesafe.engine.checkpoint import weight_bytes
    cfg = llm.config
    kv = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * CONTEXT
    return (weight_bytes(cfg, 2) + kv) / decode_profile.HBM


def run_variant(llm, name: str, base) -> dict:
    steps = llm.decode_steps
    prompt = [{"prompt_token_ids": list(range(1000, 1128))}]
    params = SamplingParams(max_tokens=8, temperature=0.0, logprobs=1, ignore_eos=True)
    t = time.perf_counter()
    with Switches(VARIANTS[name]):
        steps.steps = {}
        out = llm.generate(prompt, params)[0].outputs[0]
        step = steps.steps[1]
        with torch.inference_mode():
            step.a.positions.fill_(CONTEXT - 1)
            step.a.lens.fill_(CONTEXT)
            step.a.slots.fill_(CONTEXT - 1)
        g = step.graphs[True]
        ms = gpu_ms(g.replay)
        lps = [next(iter(d.values())).logprob for d in out.logprobs]
        row = {"case": name, "gpu_ms": round(ms, 4), "splits": step.ws.attention.splits,
               "tokens": list(out.token_ids), "wall_s": round(time.perf_counter() - t, 1)}
        if base is not None:
            row["same_tokens"] = row["tokens"] == base["tokens"]
            same = next((i for i, (a, b) in enumerate(zip(row["tokens"], base["tokens"])) if a != b), len(lps))
            row["first_different_token"] = None if same == len(lps) else same
            # up to the first different token (after it the contexts differ)
            row["max_logprob_diff"] = round(max([abs(a - b) for a, b in zip(lps[:same + 1], base["lps"])]), 5)
        row["lps"] = lps
        row["ideal_over_step"] = round(ideal_s(llm) / (ms / 1e3), 4)
    return row


def probe(size: str, names: list[str], profile: bool) -> dict:
    res = {"size": size, "variants": []}
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=MAX_LEN, max_num_seqs=1,
                          progress=False)
    base = None
    for name in names:
        if left() < 0 and base is not None:
            res["variants"].append({"case": name, "skipped": "budget"})
            continue
        try:
            row = run_variant(llm, name, base)
            base = base or row
        except Exception as e:
            row = {"case": name, "error": repr(e)[:500], "trace": traceback.format_exc()[-1500:]}
        print(size, {k: v for k, v in row.items() if k not in ("lps", "trace")}, flush=True)
        res["variants"].append(row)
    if profile:
        timed = [r for r in res["variants"] if "gpu_ms" in r and r.get("max_logprob_diff", 0) < 0.1]
        chosen = PROFILE or (["default", min(timed, key=lambda r: r["gpu_ms"])["case"]] if timed else [])
        for name in dict.fromkeys(c for c in chosen if any(r["case"] == c and "gpu_ms" in r for r in timed)):
            if left() < -20:
                break
            t = time.perf_counter()
            try:
                with Switches(VARIANTS[name]):
                    llm.decode_steps.steps = {}
                    llm.generate([{"prompt_token_ids": list(range(1000, 1128))}],
                                 SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
                    step_ms = next(r["gpu_ms"] for r in res["variants"] if r["case"] == name)
                    p = decode_profile.profile_step(llm, CONTEXT, ideal_s(llm), step_ms / 1e3)
                decode_profile.print_profile(f"{size} {name}", p)
                res[f"profile_{name}"] = p
                print(f"[{size} {name}] profile took {time.perf_counter() - t:.1f} s", flush=True)
            except Exception as e:
                res[f"profile_{name}"] = {"error": repr(e)[:500], "trace": traceback.format_exc()[-1500:]}
                print(res[f"profile_{name}"], flush=True)
    del llm
    torch.cuda.empty_cache()
    return res


def main():
    sizes = [s for s in (sys.argv[2] if len(sys.argv) > 2 else "4b,0.6b").split(",") if s]
    names = [v for v in sys.argv[3].split(",") if v] if len(sys.argv) > 3 else list(VARIANTS)
    prof = [s for s in sys.argv[4].split(",") if s] if len(sys.argv) > 4 else sizes[:1]
    out = {"device": torch.cuda.get_device_name(), "runs": []}
    for size in sizes:
        if left() < 0 and out["runs"]:
            out["runs"].append({"size": size, "skipped": "budget"})
            continue
        try:
            out["runs"].append(probe(size, names, size in prof))
        except Exception as e:
            out["runs"].append({"size": size, "error": repr(e)[:500], "trace": traceback.format_exc()[-1500:]})
    out["wall_s"] = round(time.perf_counter() - T0, 1)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1, default=str))
    print(f"\n{'size':>5} {'case':<12} {'gpu ms':>8} {'roof':>6} {'same':>5} {'dlp':>8} {'splits':>6} {'wall':>5}"
          "  (dlp: largest log-prob difference up to the first different token)")
    for r in out["runs"]:
        for v in r.get("variants", []):
            if "gpu_ms" in v:
                print(f"{r['size']:>5} {v['case']:<12} {v['gpu_ms']:>8.4f} {v['ideal_over_step']:>6} "
                      f"{str(v.get('same_tokens', '-')):>5} {v.get('max_logprob_diff', '-'):>8} {v['splits']:>6} "
                      f"{v['wall_s']:>5}")
            else:
                print(f"{r['size']:>5} {v['case']:<12} {v.get('error', v.get('skipped', ''))[:100]}")
        if "error" in r:
            print(r["size"], r["error"])
    print("wall", out["wall_s"], "s")
    def brief(p: dict) -> dict:
        return {"summary": p.get("summary"), **{f"{part}_{key}": p.get(part, {}).get(key)
                                                for part in ("plain", "pdl") for key in ("by_kind", "per_position")}}
    compact = [{"size": r.get("size"), **{k: brief(v) for k, v in r.items()
                                          if k.startswith("profile_") and isinstance(v, dict)}} for r in out["runs"]]
    print("PROFILES", json.dumps(compact, default=str))          # the log alone carries them back


if __name__ == "__main__":
    main()
