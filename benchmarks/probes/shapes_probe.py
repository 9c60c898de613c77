"""Probe (issue 22): small-M GEMM at the weight-read rate, decode attention at MHA / long
contexts, flash attention on ragged lengths: candidate configs beside the library's choice.

Three parts, each implementation checked against torch first (poisoned output), then timed
side by side with the bench's timer (rotated buffer sets, CUDA graphs, median):
  small   M in {2, 4, 8, 16, 32, 72, 128} on Qwen3-4B / 8B decode weights: the library's
          choice ("ts default"), weight-streaming candidates (M <= 16: the skinny tensor-core
          path's column / K tiles and splits; M > 16: one row tile of all M rows, narrow column
          tiles, split-K to fill the SMs) vs F.linear, and each time against the M = 1 GEMV
          of the same weight ("gemv x": 1.0 = the weight read at the GEMV's rate);
  decode  one query per head over a full cache, MHA and GQA at long contexts, head dim 64
          (training neighbours first, then the random run's worst draws): key tiles, blocks
          per SM, warps, stages vs every SDPA backend;
  flash   ragged lengths (the masked, non-TMA path) and their power-of-two neighbours: tiles,
          and TMA descriptors forced on for the 4-D pointer kernel (`tma=True`) vs SDPA.
A failing candidate is recorded with its error and skipped; each part stops starting cases past
its budget (the whole run stays under ~90 s on an H200). Prints a table; JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/shapes_probe.py "$OUT/shapes/shapes.json" [parts]
parts: a comma list of small, decode, flash (the default) and verify (the library's own choice only, vs
F.linear / SDPA: other Qwen3 sizes and the random run's worst draws, which are measured, never fitted);
wave (session 17: 16 < M <= 128 products with few output tiles — each tile shape unsplit and split over K
so that tiles x splits just fills / just overfills the SMs, on Qwen3 training weights, then the random
run's worst draws to verify) and gemv (M = 1: column / K tiles, stages and warps on a short-K weight);
session 18: split (K split in 1..8 slices, one launch or two, per tile shape, on the few-tile products),
bigm (M ~ 3000 rows by a short K: tile shapes, persistent or not), gemv2 (M = 1, short K: narrow column
tiles of short K tiles) and auto (the first-use autotune's pick, the model's choice and every candidate the
autotune times; run it alone, with TILESAFE_CACHE_DIR set to an empty folder); session 19: gemv3 (the
short-K GEMV rule against its neighbours on synthetic weights of padded K) and rows (32-row tiles for 72..83
rows of few output tiles).
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # side_by_side, beside this file
from side_by_side import predicted_us, vs_fastest_sdpa  # noqa: E402

BUDGET_S = {"small": 52.0, "decode": 15.0, "flash": 16.0, "verify": 55.0, "wave": 58.0, "gemv": 18.0, "split": 50.0,
            "bigm": 14.0, "gemv2": 12.0, "auto": 80.0,
            "gemv3": 20.0, "rows": 22.0}
TOTAL_S = 92.0
START = time.monotonic()
_PART_START: dict = {}

# Qwen3 decode weights (N, K) of the training set, most telling first (a part past its budget drops the last)
WEIGHTS = (("4B down", 2560, 9728), ("8B o", 4096, 4096), ("4B qkv", 6144, 2560), ("4B gate_up", 19456, 2560),
           ("4B o", 2560, 4096), ("8B down", 4096, 12288), ("8B qkv", 6144, 4096))
SMALL_M = (8, 2, 4, 16, 32, 72, 128)
# M <= 16, the skinny tensor-core path: (block_n, block_k, warps, stages, split_k, block_m, tma)
# (each config compiles twice, for M = 2..8 and for M = 16: few and telling, the compiles dominate);
# tma False: pointer loads, which the tuner's M = 16 runs found 5-20% faster than TMA on 10 of 11 weights
SKINNY = ((16, 512, 4, 3, 1, 16, False), (32, 256, 4, 4, 1, 16, False), (64, 256, 4, 4, 1, 16, False),
          (32, 256, 4, 4, 1, 64, False), (32, 256, 4, 4, 4, 16, False), (32, 256, 4, 4, 1, 16, None))
# M > 16, one row tile of all rows (the weight read once): (block_n, block_k, warps, tma), each with
# split-K 1 and the count that gives >= 2 blocks per SM; for M > 64 also 64-row tiles (two row tiles
# share the weight through L2): (block_n, block_k, warps, tma)
STREAM = ((64, 128, 4, None), (64, 128, 4, False), (128, 128, 8, None))
HALF = ((128, 64, 4, None), (128, 64, 4, False))


def skinny_config(bn, bk, warps, stages, split, bm, tma):
    return {"block_m": bm, "block_n": bn, "block_k": bk, "min_blocks": 1, "split_k": split, "prefetch": False,
            "num_warps": warps, "num_stages": stages, "tma": tma}


def stream_configs(gm, m, n, k, gpu):
    """Weight-streaming matmul configs for M > 16 rows."""
    out = {}
    whole = min(128, max(16, _pow2(m)))
    tiles = [(whole, *t, True) for t in STREAM] + ([(64, *t, False) for t in HALF] if m > 64 else [])
    for bm, bn, bk, warps, tma, split_too in tiles:
        stages = gm._stage_options(bm, bn, bk, 2, gpu)
        if not stages:
            continue
        cols, kt = -(-n // bn), -(-k // bk)
        fill = max(1, min(8, -(-2 * gpu.sms // cols), kt // 4)) if split_too else 1
        for split in dict.fromkeys((1, fill)):
            c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": split,
                 "min_blocks": gpu.sms, "tail_split": False, "num_warps": warps, "num_stages": stages[0], "tma": tma}
            out[f"st {bm}x{bn}x{bk} w{warps} s{stages[0]}" + (f" sk{split}" if split > 1 else "") +
                (" ptr" if tma is False else "")] = c
    return out


# --- small M ------------------------------------------------------------------------------------

def part_small(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu):
    out = {}
    for wname, n, k in WEIGHTS:
        if over("small"):
            out[wname] = {"skipped": "time budget"}
            continue
        guarded(out, wname, lambda: one_weight(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu,
                                               wname, n, k))
    return out


def one_weight(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu, wname, n, k):
    sets = rotation_sets(n * k * 2 + 2 * 128 * (n + k))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
    res = {}
    x1 = [torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    y1 = [torch.empty(1, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    gemv = measure({"gemv": (lambda i: ts.kernels.linear(x1[i], ws[i], out=y1[i]), "tilesafe"),
                    "F.linear": (lambda i: torch.nn.functional.linear(x1[i], ws[i], out=y1[i]), "torch")},
                   sets, result_check(y1[0], torch.nn.functional.linear(x1[0].float(), ws[0].float())),
                   "gemv", "x", policy)
    gemv_us = gemv.get("gemv", {}).get("us")
    res["M=1"] = gemv
    print(f"\n{wname} ({n}x{k}) M=1: " + ", ".join(f"{key} {v['us']:.2f} us" if "us" in v else f"{key} {v}"
                                               for key, v in gemv.items()), flush=True)
    for m in SMALL_M:
        if over("small"):
            res[f"M={m}"] = {"skipped": "time budget"}
            continue
        guarded(res, f"M={m}", lambda: one_small(ts, cm, gm, measure, result_check, policy, gpu, wname, ws, sets,
                                                 m, n, k, gemv_us))
    return {"shape": [n, k], "gemv_us": gemv_us, "by_m": res}


def one_small(ts, cm, gm, measure, result_check, policy, gpu, wname, ws, sets, m, n, k, gemv_us):
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    cs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ref = torch.nn.functional.linear(xs[0].float(), ws[0].float())
    shape = cm.Gemm(m, n, k, "bf16")
    impls = {"F.linear": (lambda i: torch.nn.functional.linear(xs[i], ws[i], out=cs[i]), "torch"),
             "ts default": (lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i]), "tilesafe")}
    if m <= 16:
        configs = {"sk bn{}bk{}w{}s{}sp{}bm{}".format(*c[:6]) + (" ptr" if c[6] is False else " tma"):
                   skinny_config(*c) for c in SKINNY if c[4] == 1 or n <= 8192}
    else:
        configs = stream_configs(gm, m, n, k, gpu)
    configs = {key: c for key, c in configs.items() if cm.valid(shape, c, gpu)}
    for key, cfg in configs.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i], config=c))(cfg), "tilesafe")
    entry = measure(impls, sets, result_check(cs[0], ref, error="max"), "F.linear", "vs_torch", policy)
    for key, v in entry.items():
        if "us" in v and gemv_us:
            v["vs_gemv"] = gemv_us / v["us"]
            v["tb_s"] = n * k * 2 / v["us"] / 1e6
        if key in configs:
            v["config"] = configs[key]
            v["predicted_us"] = predicted_us(cm, shape, configs[key], gpu)
    entry["ts default"]["predicted_us"] = predicted_us(cm, shape, _default(cm, shape, gpu), gpu)
    report(f"{wname} M={m} ({n}x{k})", entry, "vs_torch",
           extra=lambda v: f" gemv x{v.get('vs_gemv', 0):.3f} {v.get('tb_s', 0):4.2f} TB/s" +
           (f" pred {v['predicted_us']:6.2f}" if v.get("predicted_us") else ""))
    return entry


def _default(cm, shape, gpu):
    try:
        return cm.choose(shape, gpu)
    except Exception:                                # noqa: BLE001 - a probe records what it can
        return None


# --- decode attention -----------------------------------------------------------------------------

# (heads, KV heads, context, head dim): training neighbours first, then the random run's worst draws
DECODE_SHAPES = ((32, 32, 8192, 64), (16, 16, 16384, 64), (32, 8, 16384, 64), (25, 25, 10918, 64),
                 (14, 2, 633, 64), (71, 1, 13763, 64))
# (block_n, target blocks per SM, warps, stages)
DECODE_CANDS = ((64, 2, 4, 3), (64, 4, 4, 3), (128, 2, 4, 3), (128, 4, 4, 3), (64, 8, 4, 3), (32, 4, 4, 4))


def part_decode(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    out = {}
    for h, hkv, ctx, d in DECODE_SHAPES:
        name = f"decode h={h}/{hkv} ctx={ctx} d={d}"
        if over("decode"):
            out[name] = {"skipped": "time budget"}
            continue
        guarded(out, name, lambda: one_decode(ts, cm, measure, result_check, rotation_sets, policy, gpu, name,
                                              h, hkv, ctx, d))
    return out


def one_decode(ts, cm, measure, result_check, rotation_sets, policy, gpu, name, h, hkv, ctx, d, cands=DECODE_CANDS):
    from tilesafe.bench.families.attention import sdpa_impls
    kv_bytes = 2 * hkv * ctx * d * 2
    sets = rotation_sets(kv_bytes)
    qs = [torch.randn(h, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ks = [torch.randn(hkv, ctx, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    vs = [torch.randn(hkv, ctx, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    os_ = [torch.empty(h, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    lens = torch.full((1,), ctx, dtype=torch.int32, device="cuda")
    rep = h // hkv
    ref = torch.nn.functional.scaled_dot_product_attention(
        qs[0].float()[None, :, None], ks[0].float().repeat_interleave(rep, 0)[None],
        vs[0].float().repeat_interleave(rep, 0)[None])[0, :, 0]
    shape = cm.Decode(h, hkv, ctx, d, "bf16")
    impls = {}
    for key, f in sdpa_impls("cuda", default=True, enable_gqa=h != hkv):
        impls["unchecked " + key] = ((lambda f: lambda i: f(qs[i][None, :, None], ks[i][None], vs[i][None]))(f),
                                     "torch")
    configs = {"ts default": None}
    for bn, per_sm, w, st in cands:
        configs[f"ts bn{bn} x{per_sm} w{w} s{st}"] = {"block_n": bn, "splits": None, "target_blocks": per_sm * gpu.sms,
                                                      "flat": True, "one_kernel": False, "num_warps": w,
                                                      "num_stages": st}
    for key, cfg in configs.items():
        wsp = ts.kernels.decode_workspace(qs[0], ks[0], cfg)
        impls[key] = ((lambda c, wsp: lambda i: ts.kernels.decode_attention(qs[i], ks[i], vs[i], lens, out=os_[i],
                                                                            workspace=wsp, config=c))(cfg, wsp),
                      "tilesafe")
    entry = measure(impls, sets, result_check(os_[0], ref, unchecked=("unchecked",)), "unchecked sdpa", "vs_sdpa",
                    policy)
    fastest = vs_fastest_sdpa(entry)
    for key, v in entry.items():
        if "us" in v:
            v["tb_s"] = kv_bytes / v["us"] / 1e6
        cfg = configs.get(key) if key in configs else None
        if key in configs:
            cfg = cfg or _default(cm, shape, gpu)
            v["config"] = cfg
            v["predicted_us"] = predicted_us(cm, shape, cfg, gpu) if cfg else None
    report(name, entry, "vs_fastest_sdpa", extra=lambda v: f" {v.get('tb_s', 0):4.2f} TB/s" +
           (f" pred {v['predicted_us']:6.2f}" if v.get("predicted_us") else ""))
    return {"shape": [h, hkv, ctx, d], "impls": entry, "fastest_sdpa_us": fastest}


# --- flash attention ------------------------------------------------------------------------------

# (batch, heads, KV heads, length, head dim, causal): ragged lengths (training: Qwen3 layouts at
# lengths that are no multiple of 64) beside a power-of-two one, then the random run's worst draw
FLASH_SHAPES = ((2, 32, 8, 1500, 128, False), (2, 32, 8, 1536, 128, False), (2, 32, 8, 1000, 128, True),
                (4, 32, 4, 1432, 128, False))
# (block_m, block_n, warps, stages, tma): False pointers (masked loads on ragged lengths), True rank-4
# descriptors on the 4-D kernel (ragged) / every tensor (flat); the default takes TMA on ragged lengths
FLASH_CANDS = ((64, 64, 4, 3, False), (64, 64, 4, 3, True), (128, 64, 8, 3, True), (128, 128, 8, 2, True))


def part_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu):
    out = {}
    for b, h, kv, s, d, causal in FLASH_SHAPES:
        name = f"flash b={b} h={h}/{kv} s={s} d={d}{' causal' if causal else ''}"
        if over("flash"):
            out[name] = {"skipped": "time budget"}
            continue
        guarded(out, name, lambda: one_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu, name,
                                             b, h, kv, s, d, causal))
    return out


def one_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu, name, b, h, kv, s, d, causal,
              cands=FLASH_CANDS):
    from tilesafe.bench.families.attention import sdpa_impls
    sets = rotation_sets(2 * (b * h * s * d + 2 * b * kv * s * d))
    qs = [torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ks = [torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    vs = [torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    os_ = [torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    rep = h // kv
    ref = torch.nn.functional.scaled_dot_product_attention(
        qs[0].float(), ks[0].float().repeat_interleave(rep, 1), vs[0].float().repeat_interleave(rep, 1),
        is_causal=causal)
    shape = cm.Attention(b, h, kv, s, s, d, causal, "bf16")
    impls = {}
    for key, f in sdpa_impls("cuda", default=False, is_causal=causal, enable_gqa=True):
        if key != "sdpa-efficient":                  # slowest everywhere: time spent elsewhere
            impls["unchecked " + key] = ((lambda f: lambda i: f(qs[i], ks[i], vs[i]))(f), "torch")
    impls["ts default"] = (lambda i: ts.kernels.flash_attention(qs[i], ks[i], vs[i], causal, out=os_[i]), "tilesafe")
    configs = {}
    for bm, bn, w, st, tma in cands:
        c = {"block_m": bm, "block_n": bn, "flat": True, "num_warps": w, "num_stages": st}
        if tma is not None:
            c["tma"] = tma
        if cm.valid(shape, c, gpu):
            configs[f"ts {bm}x{bn} w{w} s{st}{' tma' if tma else ' ptr'}"] = c
    for key, cfg in configs.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.flash_attention(qs[i], ks[i], vs[i], causal, out=os_[i],
                                                                     config=c))(cfg), "tilesafe")
    entry = measure(impls, sets, result_check(os_[0], ref, unchecked=("unchecked",)), "unchecked sdpa-flash",
                    "vs_sdpa_flash", policy)
    fastest = vs_fastest_sdpa(entry)
    flops = am.flash_flops(shape)
    for key, v in entry.items():
        if "us" in v:
            v["tflops"] = flops / v["us"] / 1e6
        if key in configs:
            v["config"] = configs[key]
            v["predicted_us"] = predicted_us(cm, shape, configs[key], gpu)
    entry["ts default"]["predicted_us"] = predicted_us(cm, shape, _default(cm, shape, gpu), gpu)
    report(name, entry, "vs_fastest_sdpa", extra=lambda v: f" {v.get('tflops', 0):5.0f} TF/s" +
           (f" pred {v['predicted_us']:7.1f}" if v.get("predicted_us") else ""))
    return {"shape": [b, h, kv, s, d, causal], "impls": entry, "fastest_sdpa_us": fastest}


# --- verify: the library's own choice only, on shapes the fit never saw -------------------------

# (name, M, N, K): Qwen3 shapes whose rule configs round 1 did not time (splits, shallow pipelines),
# other Qwen3 sizes (training), and the random run's worst GEMM draws (held out: measured, never fitted)
VERIFY_GEMM = (("4B down", 72, 2560, 9728), ("held-out", 83, 4608, 3584), ("4B gate_up", 72, 19456, 2560),
               ("held-out", 72, 3584, 18944), ("4B o", 72, 2560, 4096), ("4B gate_up", 32, 19456, 2560),
               ("held-out", 125, 4608, 3584), ("8B o", 48, 4096, 4096), ("held-out", 52, 5120, 4096),
               ("4B down", 48, 2560, 9728), ("held-out", 38, 5120, 17920), ("held-out", 45, 35840, 5120),
               ("0.6B down", 100, 1024, 3072), ("held-out", 61, 1600, 6400), ("0.6B qkv", 8, 4096, 1024),
               ("32B qkv", 48, 10240, 5120), ("32B down", 24, 5120, 25600))


def part_verify(ts, cm, am, measure, result_check, rotation_sets, policy, gpu):
    out = {}
    for h, hkv, ctx, d in DECODE_SHAPES[3:]:       # cheap (the default beside SDPA): first
        name = f"decode h={h}/{hkv} ctx={ctx} d={d}"
        guarded(out, name, lambda: one_decode(ts, cm, measure, result_check, rotation_sets, policy, gpu, name,
                                              h, hkv, ctx, d, cands=()))
    b, h, kv, s, d, causal = FLASH_SHAPES[-1]
    name = f"flash b={b} h={h}/{kv} s={s} d={d}"
    guarded(out, name, lambda: one_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu, name,
                                         b, h, kv, s, d, causal, cands=()))
    for wname, m, n, k in VERIFY_GEMM:
        name = f"{wname} M={m} ({n}x{k})"
        if over("verify"):
            out[name] = {"skipped": "time budget"}
            continue
        guarded(out, name, lambda: one_verify(ts, cm, measure, result_check, rotation_sets, policy, gpu, name,
                                              m, n, k))
    return out


def one_verify(ts, cm, measure, result_check, rotation_sets, policy, gpu, name, m, n, k):
    from tilesafe.kernels import gemm_model as gm
    sets = rotation_sets((m * k + n * k + m * n) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
    cs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ref = torch.nn.functional.linear(xs[0].float(), ws[0].float())
    impls = {"F.linear": (lambda i: torch.nn.functional.linear(xs[i], ws[i], out=cs[i]), "torch"),
             "ts default": (lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i]), "tilesafe")}
    shape = cm.Gemm(m, n, k, "bf16")
    ranked = {f"ranked#{i}": c for i, c in enumerate(cm.ranked(shape, 3, gpu))}   # the choice's runners-up
    rule = gm.streaming_choice(shape, gpu)
    if rule is not None:                           # the rule's tiles with the deepest pipeline / no split
        deep = gm._stage_options(rule["block_m"], rule["block_n"], rule["block_k"], 2, gpu)[0]
        for key, alt in (("rule deep", dict(rule, num_stages=deep)), ("rule unsplit", dict(rule, split_k=1))):
            if alt != rule and alt not in ranked.values():
                ranked[key] = alt
    for key, cfg in ranked.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i], config=c))(cfg), "tilesafe")
    entry = measure(impls, sets, result_check(cs[0], ref, error="max"), "F.linear", "vs_torch", policy)
    for key, cfg in ranked.items():
        if key in entry:
            entry[key]["config"] = cfg
            entry[key]["predicted_us"] = predicted_us(cm, shape, cfg, gpu)
    entry["ts default"]["model"] = _default(cm, shape, gpu)
    entry["ts default"]["predicted_us"] = predicted_us(cm, shape, _default(cm, shape, gpu), gpu)
    for v in entry.values():
        if "us" in v:
            v["tb_s"] = n * k * 2 / v["us"] / 1e6
    report(name, entry, "vs_torch", extra=lambda v: f" {v.get('tb_s', 0):4.2f} TB/s" +
           (f" pred {v['predicted_us']:6.2f}" if v.get("predicted_us") else ""))
    return entry


# --- wave: mid-M products with few output tiles (session 17) ------------------------------------

# (name, M, N, K): Qwen3 training weights with as few output tiles as the held-out worst draws (fitting),
# then those draws (held out: measured, never fitted) and the 4B down projection at M = 24..100
WAVE_GEMM = (("8B o", 83, 4096, 4096), ("held-out", 83, 4608, 3584), ("4B down", 72, 2560, 9728),
             ("8B qkv", 125, 6144, 4096), ("4B down", 48, 2560, 9728), ("held-out", 125, 4608, 3584),
             ("4B o", 72, 2560, 4096), ("4B down", 100, 2560, 9728), ("4B down", 24, 2560, 9728),
             ("4B qkv", 100, 6144, 2560), ("8B o", 125, 4096, 4096))
# (BM, BN, BK, warps, stages): the tiles the model and the tuned table use at these sizes
WAVE_TILES = ((32, 64, 128, 4, 8), (64, 128, 128, 4, 4), (64, 128, 64, 4, 8), (128, 128, 64, 8, 4),
              (128, 64, 128, 4, 4), (64, 256, 64, 8, 4))


def wave_configs(cm, shape, gpu):
    """Each tile of WAVE_TILES unsplit, and split over K into floor(SMs / tiles) slices (one wave
    that just fills the SMs; 2 where that is 1: just past them), each slice >= 4 K tiles, the
    splits added up by a second kernel and ("1k") by the last split of each tile."""
    out = {}
    for bm, bn, bk, warps, stages in WAVE_TILES:
        if bm > max(32, _pow2(shape.m)) or (bm == 32 and shape.m > 32):   # padding rows only / many row tiles
            continue
        tiles, kt = -(-shape.m // bm) * -(-shape.n // bn), -(-shape.k // bk)
        for split in sorted({1, max(2, gpu.sms // tiles)}):
            if split > 1 and (kt // split < 4 or split > 16):
                continue
            c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": split,
                 "min_blocks": gpu.sms, "tail_split": False, "num_warps": warps, "num_stages": stages}
            if cm.valid(shape, c, gpu):
                out[f"{bm}x{bn}x{bk} w{warps} s{stages} sk{split} ({tiles * split})"] = c
                if split > 1:                     # the last split of each tile adds them up: one launch (S16)
                    out[f"{bm}x{bn}x{bk} w{warps} s{stages} sk{split} ({tiles * split}) 1k"] = dict(c, one_kernel=True)
    return out


def part_wave(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("wave", gemm_cases(cm, WAVE_GEMM), wave_configs, ts, cm, measure, result_check, rotation_sets,
                     policy, gpu)


def gemm_cases(cm, gemms):
    """(name, shape) of each (name, M, N, K)."""
    return [(f"{wname} M={m} ({n}x{k})", cm.Gemm(m, n, k, "bf16")) for wname, m, n, k in gemms]


def gemv_cases(cm, weights):
    """(name, shape) of each weight (name, N, K) times one row."""
    return [(f"gemv {wname} ({n}x{k})", cm.Gemm(1, n, k, "bf16")) for wname, n, k in weights]


def grid_part(part, cases, configs, ts, cm, measure, result_check, rotation_sets, policy, gpu, copy=False):
    """Each case's grid of configs(cm, shape, gpu) (one_grid), skipped once the part's time is over."""
    out = {}
    for name, shape in cases:
        if over(part):
            out[name] = {"skipped": "time budget"}
            continue
        guarded(out, name, lambda: one_grid(ts, cm, measure, result_check, rotation_sets, policy, gpu, name, shape,
                                            configs(cm, shape, gpu), copy=copy))
    return out


# (name, N, K): a short K (few K tiles per block) and many columns: training weights, then the held-out draw
GEMV_WEIGHTS = (("4B qkv", 6144, 2560), ("held-out", 12800, 1600), ("4B gate_up", 19456, 2560))
# (block_n, block_k, warps, stages, split): narrow and wide column tiles, K tiles that divide 1600 (64)
GEMV_CANDS = ((32, 128, 4, 3, 1), (32, 64, 4, 3, 1), (32, 64, 4, 4, 1), (64, 64, 4, 3, 1), (16, 128, 4, 4, 1),
              (16, 256, 4, 3, 1), (8, 512, 4, 3, 1), (64, 128, 8, 3, 1), (32, 128, 8, 4, 1), (128, 32, 4, 4, 1),
              (32, 128, 4, 3, 2), (64, 64, 4, 4, 2), (64, 64, 4, 4, -2))     # -2: split in 2, one launch


def gemv_configs(cm, shape, gpu):
    cands = {f"bn{bn} bk{bk} w{w} s{st} sp{sp}": {"block_m": 16, "block_n": bn, "block_k": bk, "min_blocks": 1,
                                                 "split_k": abs(sp), "prefetch": False, "one_kernel": sp < 0,
                                                 "num_warps": w, "num_stages": st}
             for bn, bk, w, st, sp in GEMV_CANDS}
    return {key: c for key, c in cands.items() if cm.valid(shape, c, gpu)}


def part_gemv(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("gemv", gemv_cases(cm, GEMV_WEIGHTS), gemv_configs, ts, cm, measure, result_check,
                     rotation_sets, policy, gpu, copy=True)


def one_grid(ts, cm, measure, result_check, rotation_sets, policy, gpu, name, shape, configs, copy=False):
    """The library's choice and each config of `configs` (through `linear(config=...)`) beside
    F.linear, checked first; with `copy`, a plain read of the weight (the weight-read rate) too."""
    m, n, k = shape.m, shape.n, shape.k
    sets = rotation_sets((m * k + n * k + m * n) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
    cs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ref = torch.nn.functional.linear(xs[0].float(), ws[0].float())
    impls = {"F.linear": (lambda i: torch.nn.functional.linear(xs[i], ws[i], out=cs[i]), "torch"),
             "ts default": (lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i]), "tilesafe")}
    if copy:                                       # the bench's weight-read ceiling of a GEMV
        from tilesafe.bench.twins import read as read_twin
        sums = torch.empty(read_twin.partials(n * k), device="cuda")
        impls["unchecked weight read"] = (lambda i: read_twin.read_all(sums, ws[i].view(-1)), "torch")
    for key, cfg in configs.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i], config=c))(cfg), "tilesafe")
    entry = measure(impls, sets, result_check(cs[0], ref, error="max", runs=2, unchecked=("unchecked",)), "F.linear",
                    "vs_torch", policy)
    for key, cfg in configs.items():
        if key in entry:
            entry[key]["config"] = cfg
            entry[key]["predicted_us"] = predicted_us(cm, shape, cfg, gpu)
    entry["ts default"]["model"] = _default(cm, shape, gpu)
    entry["ts default"]["predicted_us"] = predicted_us(cm, shape, entry["ts default"]["model"], gpu)
    for v in entry.values():
        if "us" in v:
            v["tb_s"] = n * k * 2 / v["us"] / 1e6
    report(name, entry, "vs_torch", extra=lambda v: f" {v.get('tb_s', 0):4.2f} TB/s" +
           (f" pred {v['predicted_us']:6.2f}" if v.get("predicted_us") else ""))
    return entry


# --- split: a split-K sweep of mid-M products with few output tiles (session 18) ------------------

# (name, M, N, K): Qwen3 training weights whose tile counts match the held-out worst draws (fitting),
# then those draws (held out: measured, never fitted)
# (each training shape beside the draw it stands for: a case past the budget is dropped)
SPLIT_GEMM = (("8B o", 83, 4096, 4096), ("held-out", 83, 4608, 3584), ("8B qkv", 125, 6144, 4096),
              ("held-out", 125, 4608, 3584), ("4B down", 72, 2560, 9728), ("held-out", 72, 3584, 18944),
              ("4B qkv", 100, 6144, 2560))
# (BM, BN, BK, warps, stages): shallow enough pipelines for two or three blocks per SM; 64 x 256 for long K
SPLIT_TILES = ((64, 128, 64, 4, 4), (64, 64, 128, 4, 3), (128, 64, 64, 4, 4), (64, 256, 64, 8, 4))
SPLIT_ONE = (1, 2, 3, 4, 6)                 # K slices added up by the last slice of each tile (1: unsplit)
SPLIT_TWO = (3,)                            # ... by a second kernel


def split_configs(cm, shape, gpu):
    """Each tile with the splits above and the ones that fill one, two or three blocks per SM
    (floor(w x SMs / tiles)), added up by the last slice (1k) and, for those, by a second kernel."""
    out = {}
    for bm, bn, bk, warps, stages in SPLIT_TILES:
        if bn == 256 and shape.k < 8192:
            continue
        tiles, kt = -(-shape.m // bm) * -(-shape.n // bn), -(-shape.k // bk)
        fills = {w * gpu.sms // tiles for w in (1, 2, 3)} - {0, 1}
        ones, twos = sorted(set(SPLIT_ONE) | fills), sorted(set(SPLIT_TWO) | fills)
        for split, one in [(s, True) for s in ones if s <= 16] + [(s, False) for s in twos if s <= 16]:
            if kt // split < 3:
                continue
            c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": split,
                 "min_blocks": gpu.sms, "tail_split": False, "one_kernel": one and split > 1, "num_warps": warps,
                 "num_stages": stages}
            if cm.valid(shape, c, gpu):
                out[f"{bm}x{bn}x{bk} w{warps} s{stages} sk{split}{' 1k' if one and split > 1 else ''} "
                    f"({tiles * split})"] = c
    return out


def part_split(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("split", gemm_cases(cm, SPLIT_GEMM), split_configs, ts, cm, measure, result_check,
                     rotation_sets, policy, gpu)


# --- bigm: many rows, a short K (session 18) -------------------------------------------------------

# (name, M, N, K): training squares of short K at prefill lengths, then the held-out draw
BIGM_GEMM = (("square 1024", 3197, 1024, 1024), ("square 1024", 2500, 1024, 1024),
             ("held-out", 3197, 1152, 896))
# (BM, BN, BK, warps, stages, persistent)
BIGM_TILES = ((128, 128, 64, 4, 5, True), (128, 128, 64, 4, 5, False), (128, 128, 64, 8, 4, False),
              (128, 256, 64, 8, 3, False), (256, 128, 64, 8, 3, False), (128, 64, 64, 4, 5, False),
              (128, 128, 32, 4, 6, False), (128, 256, 32, 8, 5, False))


def bigm_configs(cm, shape, gpu):
    cands = {}
    for bm, bn, bk, w, st, pers in BIGM_TILES:
        c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": pers, "split_k": 1,
             "min_blocks": gpu.sms, "tail_split": False, "one_kernel": False, "num_warps": w, "num_stages": st}
        tiles = -(-shape.m // bm) * -(-shape.n // bn)
        if cm.valid(shape, c, gpu):
            cands[f"{bm}x{bn}x{bk} w{w} s{st}{' pers' if pers else ''} ({tiles})"] = c
    return cands


def part_bigm(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("bigm", gemm_cases(cm, BIGM_GEMM), bigm_configs, ts, cm, measure, result_check,
                     rotation_sets, policy, gpu)


# --- gemv2: one row, short K: narrow column tiles of short K tiles (session 18) --------------------

# (name, N, K): weights of short K with many columns — synthetic ones (neither training nor held out:
# the rule's fit) and 4B qkv (training) — then held-out draws (measured, never fitted)
GEMV2_WEIGHTS = (("synthetic", 16384, 1024), ("synthetic", 10240, 1536), ("4B qkv", 6144, 2560),
                 ("held-out", 12800, 1600), ("synthetic", 24576, 2048), ("square 1024", 1024, 1024))
GEMV2_CANDS = ((16, 128, 4, 4), (16, 128, 4, 3), (32, 128, 4, 4), (32, 64, 4, 4), (16, 64, 4, 4), (8, 256, 4, 4),
               (32, 128, 4, 3), (16, 256, 4, 3), (8, 512, 4, 3))


def gemv2_configs(cm, shape, gpu):
    cands = {f"bn{bn} bk{bk} w{w} s{st}": {"block_m": 16, "block_n": bn, "block_k": bk, "min_blocks": 1,
                                           "split_k": 1, "prefetch": False, "one_kernel": False,
                                           "num_warps": w, "num_stages": st}
             for bn, bk, w, st in GEMV2_CANDS}
    return {key: c for key, c in cands.items() if cm.valid(shape, c, gpu)}


def part_gemv2(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("gemv2", gemv_cases(cm, GEMV2_WEIGHTS), gemv2_configs, ts, cm, measure, result_check,
                     rotation_sets, policy, gpu, copy=True)


# --- gemv3: the short-K GEMV rule on padded K tiles (session 19) -----------------------------------

# (name, N, K): synthetic weights (neither training nor held out) whose K is no multiple of 256 — the
# rule's reason for 128-wide K tiles there (1344, 1856: 256s pad K 9-10%, 128s 5-3%; 1152: 128s exact)
# — then a long one that round r1b skipped and one just past the rule's four blocks per SM (640 of 8)
GEMV3_WEIGHTS = (("synthetic", 14336, 1344), ("synthetic", 11520, 1856), ("synthetic", 9216, 1152),
                 ("synthetic", 24576, 2048), ("synthetic", 5120, 1024))
# (block_n, block_k, warps, stages)
GEMV3_CANDS = ((8, 256, 4, 4), (16, 128, 4, 4), (8, 128, 4, 4), (16, 256, 4, 3), (32, 128, 4, 3))


def gemv3_configs(cm, shape, gpu):
    """The model's ranking's own first pick (what the rule displaced) and the 4 KB / 2 KB / 8 KB loads
    around the rule's (the library's call, "ts default", runs the rule's)."""
    rule = cm.choose(shape, gpu)
    out = {"model ranking": next(c for c in cm.candidates(shape, gpu) if c != rule)}
    for bn, bk, w, st in GEMV3_CANDS:
        c = {"block_m": 16, "block_n": bn, "block_k": bk, "min_blocks": 1, "split_k": 1, "prefetch": False,
             "num_warps": w, "num_stages": st}
        if c != rule and cm.valid(shape, c, gpu):
            out[f"bn{bn} bk{bk} w{w} s{st}"] = c
    return out


def part_gemv3(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("gemv3", gemv_cases(cm, GEMV3_WEIGHTS), gemv3_configs, ts, cm, measure, result_check,
                     rotation_sets, policy, gpu, copy=True)


# --- rows: 32-row tiles for 72..83-row products of few output tiles (session 19) -------------------

# (name, M, N, K): training weights first, then the held-out worst draw (measured, never fitted).
# 64 x 128 tiles give 40-72 tiles on 132 SMs; 32-row tiles give 1.5x as many blocks, each reading the
# same 128 columns of the weight (from L2 the second and third time), one deep pipeline per SM
ROWS_GEMM = (("8B o", 83, 4096, 4096), ("4B o", 72, 2560, 4096), ("4B down", 72, 2560, 9728),
             ("held-out", 83, 4608, 3584))
# (BM, BN, BK, warps, stages, split, one launch)
ROWS_TILES = ((32, 128, 64, 4, 8, 1, False), (32, 128, 128, 4, 4, 1, False), (32, 128, 64, 4, 8, 2, True),
              (32, 64, 128, 4, 8, 2, True))


def rows_configs(cm, shape, gpu):
    out = {}
    for bm, bn, bk, w, st, split, one in ROWS_TILES:
        c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": split,
             "min_blocks": gpu.sms, "tail_split": False, "one_kernel": one, "num_warps": w, "num_stages": st}
        tiles = -(-shape.m // bm) * -(-shape.n // bn)
        if cm.valid(shape, c, gpu):
            out[f"{bm}x{bn}x{bk} w{w} s{st} sk{split}{' 1k' if one else ''} ({tiles * split})"] = c
    return out


def part_rows(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    return grid_part("rows", gemm_cases(cm, ROWS_GEMM), rows_configs, ts, cm, measure, result_check,
                     rotation_sets, policy, gpu)


# --- auto: what the first-use autotune picks, beside the model's own choice (session 18) ----------

# (name, M, N, K): training shapes first, then held-out draws (measured, never fitted); M = 1: a GEMV
AUTO_GEMM = (("8B qkv", 125, 6144, 4096), ("held-out", 125, 4608, 3584), ("8B o", 83, 4096, 4096),
             ("held-out", 83, 4608, 3584), ("4B down", 72, 2560, 9728), ("held-out", 72, 3584, 18944),
             ("synthetic", 1, 16384, 1024), ("held-out", 1, 12800, 1600), ("held-out", 61, 1600, 6400))


def part_auto(ts, cm, measure, result_check, rotation_sets, policy, gpu):
    """Each shape's first call inside `first_use_tuning()` (run with a fresh TILESAFE_CACHE_DIR):
    after it the library's call ("ts default") runs the autotune's pick; the model's own choice
    and each timed candidate run beside it through `config=`."""
    from tilesafe.bench.random_report import keys_of
    from tilesafe.kernels import configs as kc
    from tilesafe.kernels import first_use
    out = {}
    for wname, m, n, k in AUTO_GEMM:
        name = f"auto {wname} M={m} ({n}x{k})"
        if over("auto"):
            out[name] = {"skipped": "time budget"}
            continue
        shape = cm.Gemm(m, n, k, "bf16")

        def tuned_grid():
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            with first_use.first_use_tuning():
                ts.kernels.linear(x, w)
            torch.cuda.synchronize()
            picked = first_use.remembered(kc.gpu_name(), shape.family, keys_of(shape)[0])
            cands = {f"cand{i}": c for i, c in enumerate(cm.ranked(shape, first_use.CANDIDATES, gpu))}
            cands["model choice"] = cm.choose(shape, gpu)
            entry = one_grid(ts, cm, measure, result_check, rotation_sets, policy, gpu, name, shape, cands)
            entry["picked"] = picked
            print(f"   picked: {picked}", flush=True)
            return entry
        guarded(out, name, tuned_grid)
    return out


# --- helpers ------------------------------------------------------------------------------------

def guarded(out, name, run):
    """out[name] = run(), or the error it raised: one case's failure never ends the probe."""
    try:
        out[name] = run()
    except Exception as e:                           # noqa: BLE001 - recorded, the next case runs
        out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        print(f"\n{name}: {out[name]['error']}", flush=True)
    torch.cuda.empty_cache()


def over(part) -> bool:
    now = time.monotonic()
    _PART_START.setdefault(part, now)
    return now - _PART_START[part] > BUDGET_S[part] or now - START > TOTAL_S


def _pow2(n):
    return 1 << max(0, int(n) - 1).bit_length()



SUMMARY = []


def report(name, entry, ratio, extra=lambda v: ""):
    timed = {k: v for k, v in entry.items() if ratio in v}
    best = max(((v[ratio], k) for k, v in timed.items() if k != "F.linear" and not k.startswith("unchecked")),
               default=(0.0, "-"))
    dflt = entry.get("ts default", {})
    SUMMARY.append((name, dflt.get(ratio, 0.0), dflt.get("vs_gemv", 0.0), best[0], best[1]))
    print(f"\n{name}")
    for k, v in sorted(entry.items(), key=lambda kv: -kv[1].get(ratio, 0)):
        print(f"   {k:30} " + (f"{v['us']:9.2f} us {v[ratio]:.3f}{extra(v)}" if ratio in v else
                               (f"{v['us']:9.2f} us" if "us" in v else v.get("error", "")[:140])), flush=True)


def main(out_path, parts=("small", "decode", "flash")):
    import tilesafe as ts
    import tilesafe.kernels  # noqa: F401
    from side_by_side import measure, result_check
    from tilesafe.bench.timing import Policy, rotation_sets
    from tilesafe.kernels import attention_model as am
    from tilesafe.kernels import config_model as cm
    from tilesafe.kernels import gemm_model as gm
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    gpu = cm.gpu_of(None)
    # Every kernel in a graph (host cost out), short samples: ~300 timings in about a minute.
    policy = Policy(l2_bytes=getattr(props, "L2_cache_size", 0) or Policy().l2_bytes, graph_below_us=1e9,
                    graph_target_us=250.0, max_per_graph=100, sample_ms=8.0, min_samples=5, max_samples=20)
    result = {"sms": props.multi_processor_count, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "budget_s": BUDGET_S}
    runners = {"small": lambda: part_small(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu),
               "verify": lambda: part_verify(ts, cm, am, measure, result_check, rotation_sets, policy, gpu),
               "decode": lambda: part_decode(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "flash": lambda: part_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu),
               "wave": lambda: part_wave(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "gemv": lambda: part_gemv(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "split": lambda: part_split(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "bigm": lambda: part_bigm(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "gemv2": lambda: part_gemv2(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "auto": lambda: part_auto(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "gemv3": lambda: part_gemv3(ts, cm, measure, result_check, rotation_sets, policy, gpu),
               "rows": lambda: part_rows(ts, cm, measure, result_check, rotation_sets, policy, gpu)}
    for part in parts:
        try:
            result[part] = runners[part]()
        except Exception as e:                      # noqa: BLE001 - the other parts still run
            result[part] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"{part}: {result[part]['error']}", flush=True)
        result["elapsed_s"] = time.monotonic() - START
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1, default=str)
    print(f"\n{'case':44} {'default':>7} {'gemv x':>7} {'best':>7}  best candidate   (vs F.linear / fastest SDPA)")
    for name, dflt, vs_gemv, best, key in SUMMARY:
        print(f"{name:44} {dflt:7.3f} {vs_gemv:7.3f} {best:7.3f}  {key}")
    print(f"\n{time.monotonic() - START:.0f} s; JSON: {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("small", "decode", "flash"))
