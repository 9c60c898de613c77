"""Probe (issue 22): candidate configs where the random-shape benchmark missed, on TRAINING shapes.

Three parts, each timed side by side with the bench's timer (rotated buffer sets, CUDA graphs
for every kernel, median) after each candidate's output was compared with torch's:
  gemm   the small-M GEMM (33 <= M <= 200, large N x K) and M odd near 777 on Qwen3 weights:
         the model's first picks beside fixed tiles x split-K counts and tail splits, vs cuBLAS;
  flash  Qwen3 head layouts (32:8, head dim 128, and 64) at power-of-two lengths: every flash
         tile, on TMA-able row matrices (`flat`) and on pointers (the path ragged lengths take),
         vs every SDPA backend;
  gemv   M = 1 on the Qwen3 0.6B/4B/8B/32B decode weights: the library's GEMV configs (column
         tiles, K tiles, warps, stages, split-K) and raw-Triton kernel variants (rows per
         program, evict-first weight loads, a persistent grid), vs cuBLAS and a copy of the
         weight's bytes.
The shapes are the tuner's training distribution (Qwen3 weights, power-of-two lengths, Qwen3
head layouts), never the held-out draws. A candidate that fails to compile, to run or its check
is recorded with its error and skipped. Each part stops taking new shapes past its time budget
(the whole run stays under ~150 s on an H200). Prints a table; JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/gemv_gemm_sweep.py "$OUT/gemv_gemm_sweep.json"
Optional argv[2]: a comma list of parts to run (default "gemm,flash,gemv"; also "ragged": M around the
64-row tiles on one weight, whole-tile configs; "gemv-small": the 0.6B GEMVs, short K).
"""
import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # side_by_side, beside this file
from side_by_side import predicted_us, vs_fastest_sdpa  # noqa: E402

BUDGET_S = {"gemm": 50.0, "flash": 45.0, "gemv": 30.0, "ragged": 45.0, "gemv-small": 40.0}   # seconds each part may start shapes in
TOTAL_S = 140.0
START = time.monotonic()

# Qwen3 decode weights (N, K): the training set's (0.6B: hidden 1024, 16:8 heads of 128, 3072 wide MLP).
QWEN3 = {"0.6B": (1024, 3072, 16, 8), "4B": (2560, 9728, 32, 8), "8B": (4096, 12288, 32, 8),
         "32B": (5120, 25600, 64, 8)}


def projections(name):
    hidden, inter, heads, kv = QWEN3[name]
    return {"qkv": ((heads + 2 * kv) * 128, hidden), "o": (hidden, heads * 128), "gate_up": (2 * inter, hidden),
            "down": (hidden, inter)}


# --- raw-Triton GEMV variants (a new kernel variant is the only thing earlier tuning said could move it) ---

@triton.jit
def gemv_rows(y_ptr, x_ptr, w_ptr, N, K, R: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
              EVICT: tl.constexpr, PERSIST: tl.constexpr):
    """y[n] = sum_k w[n, k] x[k]: R rows per program, (R, BK) tiles of w with K contiguous (16-byte
    loads), an fp32 (R, BK) partial summed once at the end; PERSIST: a fixed grid walks the row tiles."""
    pid = tl.program_id(0)
    tiles = tl.cdiv(N, R)
    step = tiles
    if PERSIST:
        step = tl.num_programs(0)
    for t in range(pid, tiles, step):
        rows = t * R + tl.arange(0, R)
        rmask = rows < N
        base = w_ptr + rows.to(tl.int64)[:, None] * K
        acc = tl.zeros((R, BK), tl.float32)
        for k0 in tl.range(0, K, BK, num_stages=STAGES):
            cols = k0 + tl.arange(0, BK)
            cmask = cols < K
            xk = tl.load(x_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
            if EVICT:
                wk = tl.load(base + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0,
                             eviction_policy="evict_first")
            else:
                wk = tl.load(base + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)
            acc += wk.to(tl.float32) * xk[None, :]
        tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=rmask)


# (rows, K tile, warps, stages, evict-first, persistent programs per SM or 0)
RAW_GEMV = ((4, 1024, 4, 3, False, 0), (4, 1024, 4, 3, True, 0), (8, 1024, 4, 4, True, 0), (8, 512, 4, 3, True, 0),
            (16, 512, 8, 3, True, 0), (4, 2048, 8, 3, True, 0), (2, 2048, 4, 4, True, 0), (8, 1024, 4, 3, True, 2),
            (4, 2048, 4, 3, True, 4))


def raw_gemv(cfg, sms):
    r, bk, warps, stages, evict, per_sm = cfg

    def run(y, x, w):
        n, k = w.shape
        tiles = triton.cdiv(n, r)
        grid = (min(tiles, per_sm * sms) if per_sm else tiles,)
        gemv_rows[grid](y, x, w, n, k, R=r, BK=bk, STAGES=stages, EVICT=evict, PERSIST=bool(per_sm),
                        num_warps=warps)
    return run


# (block_n, block_k, warps, stages, split_k, prefetch): the library GEMV's configs (tuned ones, and wider)
TS_GEMV = ((4, 1024, 4, 4, 1, False), (4, 2048, 4, 3, 1, False), (8, 512, 4, 3, 1, False), (8, 1024, 8, 5, 1, False),
           (8, 256, 4, 3, 1, False), (4, 1024, 4, 3, 1, True), (16, 512, 4, 4, 1, False), (2, 4096, 4, 3, 1, False),
           (4, 4096, 8, 3, 1, False), (8, 1024, 4, 4, 2, False), (4, 1024, 4, 4, 4, False), (8, 512, 4, 4, 4, False))


def gemv_config(bn, bk, warps, stages, split, prefetch):
    return {"block_m": 16, "block_n": bn, "block_k": bk, "min_blocks": 1, "split_k": split, "prefetch": prefetch,
            "num_warps": warps, "num_stages": stages}


# --- the parts ---------------------------------------------------------------------------------

def part_gemv(ts, cm, measure, result_check, rotation_sets, policy, sms, gpu, models=("4B", "0.6B", "8B", "32B")):
    # 4B first (the engine's decode target), then 0.6B (short K), 8B and 32B
    shapes = [(f"{m} {p} (M=1)", n, k) for m in models for p, (n, k) in projections(m).items()]
    if "4B" in models:
        shapes.insert(4, ("4B lm_head (M=1)", 151936, 2560))
    out = {}
    for name, n, k in shapes:
        if over("gemv"):
            out[name] = {"skipped": "time budget"}
            continue
        guarded(out, name, lambda: one_gemv(ts, cm, measure, result_check, rotation_sets, policy, sms, gpu, name, n, k))
    return out


def one_gemv(ts, cm, measure, result_check, rotation_sets, policy, sms, gpu, name, n, k):
    t0 = time.monotonic()
    sets = rotation_sets(n * k * 2)
    xs = [torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
    ys = [torch.empty(1, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    dsts = [torch.empty_like(w) for w in ws]        # copies rotate over the sets too: HBM, not L2
    ref = torch.nn.functional.linear(xs[0].float(), ws[0].float())
    shape = cm.Gemm(1, n, k, "bf16")
    impls = {"cublas": (lambda i: torch.nn.functional.linear(xs[i], ws[i], out=ys[i]), "torch"),
             "unchecked copy": (lambda i: dsts[i].copy_(ws[i]), "torch"),
             "ts default": (lambda i: ts.kernels.linear(xs[i], ws[i], out=ys[i]), "tilesafe")}
    configs = {"ts model": cm.choose(shape, gpu)}
    for c in TS_GEMV:
        if c[4] > 1 and n > 8192:                 # split-K only where the outputs alone give few blocks
            continue
        configs["ts " + "bn{}bk{}w{}s{}sp{}{}".format(*c[:5], "pf" if c[5] else "")] = gemv_config(*c)
    for key, cfg in configs.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.linear(xs[i], ws[i], out=ys[i], config=c))(cfg), "tilesafe")
    for c in RAW_GEMV:
        key = "raw r{}bk{}w{}s{}{}{}".format(*c[:4], "ev" if c[4] else "", f"p{c[5]}" if c[5] else "")
        impls[key] = ((lambda f: lambda i: f(ys[i], xs[i], ws[i]))(raw_gemv(c, sms)), "torch")
    entry = measure(impls, sets, result_check(ys[0], ref, unchecked=("unchecked",)), "cublas", "vs_cublas",
                    policy)
    weight = n * k * 2
    for key, v in entry.items():
        if "us" in v:
            v["tb_s"] = (2 if key.startswith("unchecked") else 1) * weight / v["us"] / 1e6
        if key in configs:
            v["config"] = configs[key]
            v["predicted_us"] = predicted_us(cm, shape, configs[key], gpu)
    report(name, entry, "vs_cublas", extra=lambda v: f" {v.get('tb_s', 0):5.2f} TB/s")
    return {"shape": [1, n, k], "impls": entry, "seconds": time.monotonic() - t0}


# (M, Qwen3 model, projection): M from 33 to 200 on large weights, and M odd near 777
# (most telling first: a part past its budget drops the last ones)
# (97 x 5120: 2 x 80 tiles of 64 x 64, just over one wave of 132)
GEMM_SHAPES = ((72, "8B", "o"), (97, "32B", "o"), (136, "32B", "down"), (775, "4B", "qkv"), (48, "4B", "qkv"),
               (190, "8B", "qkv"), (61, "4B", "down"), (150, "32B", "qkv"), (97, "8B", "gate_up"), (771, "8B", "down"),
               (779, "4B", "down"))
# (block_m, block_n, block_k, warps) beside the model's picks, each with split-K 1, 2, 3, 4
GEMM_TILES = ((64, 128, 64, 4), (64, 64, 128, 4), (128, 128, 64, 8), (64, 256, 64, 8), (32, 128, 128, 4))


def gemm_candidates(cm, gm, shape, gpu):
    out = {}
    for i, c in enumerate(cm.ranked(shape, 4, gpu)):
        out[f"model#{i} " + _tag(c)] = c
    for bm, bn, bk, warps in GEMM_TILES:
        stages = gm._stage_options(min(bm, max(16, _pow2(shape.m))), bn, bk, 2, gpu)
        if not stages:
            continue
        base = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": 1,
                "min_blocks": gpu.sms, "tail_split": False, "num_warps": warps, "num_stages": stages[0]}
        tiles = -(-shape.m // bm) * -(-shape.n // bn)
        variants = [dict(base, split_k=s) for s in (1, 2, 3, 4)] if tiles < 2 * gpu.sms else \
            [base, dict(base, persistent=True), dict(base, tail_split=True), dict(base, persistent=True, tail_split=True)]
        for c in variants:
            if cm.valid(shape, c, gpu) and not any(c == v for v in out.values()):
                out[_tag(c)] = c
    return out


def part_gemm(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu):
    out = {}
    for m, model, proj in GEMM_SHAPES:
        n, k = projections(model)[proj]
        name = f"{model} {proj} M={m} ({n}x{k})"
        if over("gemm"):
            out[name] = {"skipped": "time budget"}
            continue
        guarded(out, name, lambda: one_gemm(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu, name, m, n, k))
    return out


def one_gemm(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu, name, m, n, k, configs=None):
    t0 = time.monotonic()
    sets = rotation_sets((m * k + n * k + m * n) * 2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
    cs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ref = torch.nn.functional.linear(xs[0].float(), ws[0].float())
    shape = cm.Gemm(m, n, k, "bf16")
    impls = {"cublas": (lambda i: torch.nn.functional.linear(xs[i], ws[i], out=cs[i]), "torch"),
             "ts default": (lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i]), "tilesafe")}
    configs = configs or gemm_candidates(cm, gm, shape, gpu)
    for key, cfg in configs.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i], config=c))(cfg), "tilesafe")
    entry = measure(impls, sets, result_check(cs[0], ref, error="max"), "cublas", "vs_cublas", policy)
    for key, v in entry.items():
        if key in configs:
            v["config"] = configs[key]
            v["predicted_us"] = predicted_us(cm, shape, configs[key], gpu)
            v["limit"] = _limit(cm, shape, configs[key], gpu)
    report(name, entry, "vs_cublas", extra=lambda v: f" pred {v['predicted_us']:7.2f}" if v.get("predicted_us")
           else "")
    return {"shape": [m, n, k], "impls": entry, "seconds": time.monotonic() - t0}


# Ragged M: one weight, M around the 64-row tiles, whole-tile configs only (why 64 x 64 x 128
# ran 20 us at M = 72 against ~12 at M = 128 in the first sweep)
RAGGED_M = (64, 72, 80, 96, 112, 128, 144, 190)
RAGGED_TILES = ((64, 64, 128, 4, 6), (64, 128, 64, 4, 8), (128, 128, 64, 4, 5), (128, 64, 64, 4, 8),
                (64, 256, 64, 8, 5), (64, 64, 64, 4, 8))


def part_ragged(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu):
    out = {}
    for model, proj in (("8B", "o"), ("8B", "qkv")):
        n, k = projections(model)[proj]
        for m in RAGGED_M:
            name = f"{model} {proj} M={m} ({n}x{k})"
            if over("ragged"):
                out[name] = {"skipped": "time budget"}
                continue
            guarded(out, name, lambda: one_gemm(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu, name,
                                                m, n, k, ragged_candidates(cm, cm.Gemm(m, n, k, "bf16"), gpu)))
    return out


def ragged_candidates(cm, shape, gpu):
    out = {}
    for i, c in enumerate(cm.ranked(shape, 2, gpu)):
        out[f"model#{i} " + _tag(c)] = c
    for bm, bn, bk, warps, stages in RAGGED_TILES:
        c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": 1,
             "min_blocks": gpu.sms, "tail_split": False, "num_warps": warps, "num_stages": stages}
        if cm.valid(shape, c, gpu) and not any(c == v for v in out.values()):
            out[_tag(c)] = c
    return out


# (batch, heads, KV heads, length, head dim, causal): Qwen3 layouts at power-of-two lengths
# (each shape compiles its own kernels: most telling first)
FLASH_SHAPES = ((2, 32, 8, 2048, 128, False), (4, 32, 8, 1024, 64, False), (1, 32, 8, 4096, 128, True))
EXTRA_FLASH = ((128, 64, 8, 2), (64, 64, 4, 4))
POINTER_FLASH = ((64, 64, 4, 3), (128, 64, 8, 3), (128, 32, 4, 3))


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


def one_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu, name, b, h, kv, s, d, causal):
    from tilesafe.bench.families.attention import sdpa_impls
    t0 = time.monotonic()
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
    for key, f in sdpa_impls("cuda", default=True, is_causal=causal, enable_gqa=True):
        impls["unchecked " + key] = ((lambda f: lambda i: f(qs[i], ks[i], vs[i]))(f), "torch")
    impls["ts default"] = (lambda i: ts.kernels.flash_attention(qs[i], ks[i], vs[i], causal, out=os_[i]),
                           "tilesafe")
    configs = {"ts model": cm.choose(shape, gpu)}
    tiles = [t[:4] for t in am.FLASH_TILES] + list(EXTRA_FLASH)
    for flat, group in ((True, tiles), (False, POINTER_FLASH)):
        for bm, bn, w, st in group:
            c = {"block_m": bm, "block_n": bn, "flat": flat, "num_warps": w, "num_stages": st}
            if cm.valid(shape, c, gpu):
                configs[f"ts {bm}x{bn} w{w} s{st}{'' if flat else ' ptr'}"] = c
    for key, cfg in configs.items():
        impls[key] = ((lambda c: lambda i: ts.kernels.flash_attention(qs[i], ks[i], vs[i], causal, out=os_[i],
                                                                     config=c))(cfg), "tilesafe")
    entry = measure(impls, sets, result_check(os_[0], ref, unchecked=("unchecked",)), "unchecked sdpa",
                    "vs_sdpa", policy)
    fastest = vs_fastest_sdpa(entry)
    flops = am.flash_flops(shape)
    for key, v in entry.items():
        if "us" in v:
            v["tflops"] = flops / v["us"] / 1e6
        if key in configs:
            v["config"] = configs[key]
            v["predicted_us"] = predicted_us(cm, shape, configs[key], gpu)
    report(name, entry, "vs_fastest_sdpa", extra=lambda v: f" {v.get('tflops', 0):5.0f} TF/s")
    return {"shape": [b, h, kv, s, d, causal], "impls": entry, "fastest_sdpa_us": fastest,
            "seconds": time.monotonic() - t0}


# --- helpers ---------------------------------------------------------------------------------

_PART_START = {}


def guarded(out, name, run):
    """out[name] = run(), or the error it raised: one shape's failure never ends the sweep."""
    try:
        out[name] = run()
    except Exception as e:                           # noqa: BLE001 - recorded, the next shape runs
        out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        print(f"\n{name}: {out[name]['error']}", flush=True)
    torch.cuda.empty_cache()


def over(part) -> bool:
    now = time.monotonic()
    _PART_START.setdefault(part, now)
    return now - _PART_START[part] > BUDGET_S[part] or now - START > TOTAL_S


def _pow2(n):
    return 1 << max(0, int(n) - 1).bit_length()


def _tag(c):
    t = f"{c['block_m']}x{c['block_n']}x{c['block_k']} w{c['num_warps']} s{c['num_stages']}"
    if (c.get("split_k") or 1) > 1:
        t += f" sk{c['split_k']}"
    if c.get("persistent"):
        t += " pers"
    if c.get("tail_split"):
        t += " tail"
    return t



def _limit(cm, shape, cfg, gpu):
    try:
        return cm.explain(shape, cfg, gpu)["limit"]
    except Exception:                                # noqa: BLE001
        return None


SUMMARY = []


def report(name, entry, ratio, extra=lambda v: ""):
    timed = {k: v for k, v in entry.items() if ratio in v}
    best = max(((v[ratio], k) for k, v in timed.items() if not k.startswith(("cublas", "unchecked"))),
               default=(0.0, "-"))
    SUMMARY.append((name, entry.get("ts default", {}).get(ratio, 0.0), entry.get("ts model", {}).get(ratio, 0.0),
                    best[0], best[1]))
    print(f"\n{name}")
    for k, v in sorted(entry.items(), key=lambda kv: -kv[1].get(ratio, 0)):
        print(f"   {k:34} " + (f"{v['us']:9.2f} us {v[ratio]:.3f}{extra(v)}" if ratio in v else
                               (f"{v['us']:9.2f} us" if "us" in v else v.get("error", "")[:140])), flush=True)


def main(out_path, parts=("gemm", "flash", "gemv")):
    import tilesafe as ts
    import tilesafe.kernels  # noqa: F401
    from side_by_side import measure, result_check
    from tilesafe.bench.timing import Policy, rotation_sets
    from tilesafe.kernels import attention_model as am
    from tilesafe.kernels import config_model as cm
    from tilesafe.kernels import gemm_model as gm
    props = torch.cuda.get_device_properties(0)
    sms, gpu = props.multi_processor_count, cm.gpu_of(None)
    # Every kernel in a graph (host cost out), short samples: ~25 shapes x ~20 candidates in ~2 minutes.
    policy = Policy(l2_bytes=getattr(props, "L2_cache_size", 0) or Policy().l2_bytes, graph_below_us=1e9,
                    graph_target_us=300.0, max_per_graph=200, sample_ms=12.0, min_samples=6, max_samples=40)
    result = {"sms": sms, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "triton": triton.__version__, "budget_s": BUDGET_S}
    runners = {"gemm": lambda: part_gemm(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu),
               "flash": lambda: part_flash(ts, cm, am, measure, result_check, rotation_sets, policy, gpu),
               "gemv": lambda: part_gemv(ts, cm, measure, result_check, rotation_sets, policy, sms, gpu),
               "ragged": lambda: part_ragged(ts, cm, gm, measure, result_check, rotation_sets, policy, gpu),
               "gemv-small": lambda: part_gemv(ts, cm, measure, result_check, rotation_sets, policy, sms, gpu,
                                               ("0.6B",))}
    for part in parts:
        try:
            result[part] = runners[part]()
        except Exception as e:                      # noqa: BLE001 - the other parts still run
            result[part] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"{part}: {result[part]['error']}", flush=True)
        result["elapsed_s"] = time.monotonic() - START
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1, default=str)
    print(f"\n{'shape':44} {'default':>7} {'model':>7} {'best':>7}  best candidate   (ratio vs cuBLAS / fastest SDPA)")
    for name, dflt, model, best, key in SUMMARY:
        print(f"{name:44} {dflt:7.3f} {model:7.3f} {best:7.3f}  {key}")
    print(f"\n{time.monotonic() - START:.0f} s; JSON: {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("gemm", "flash", "gemv"))
