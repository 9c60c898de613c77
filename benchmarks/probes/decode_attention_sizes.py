"""Probe: the decode step's attention kernels at Qwen3's head shapes (issue 17: 6.4 + 6.1 us
per layer for a 160-key context on the H200), the library's forms against the old ones.

For the 0.6B / 4B / 32B head layouts (16 / 32 / 64 query heads, 8 KV heads of 128, bf16), at
batch 1, 8, 32 and contexts 128, 1024, 4096 (caches of blocks of 16 positions, each sequence
its own blocks; the workspace sized for sequences of MAX_LEN positions, as the engine sizes
it for max_model_len), it times `paged_decode_attention` in candidate forms, each first
checked against a float32 torch oracle:
  before          the old form: a partial kernel + `decode_combine_kernel`, splits as the old
                  rule (256 blocks: min(max_len / 64, 256 / rows)), splits of >= one 64-key
                  tile (where that rule gives one split, as at batch 32, this times the
                  one-split kernel: the old form launched the combination there too)
  after           the library's default (`attention_model.paged_splits`)
  single          one split forced (one block per (sequence, KV head), no partials), to 1024 keys
  after prefetch  the default reading tile j + 1 before tile j's math (`prefetch=True`), also
                  with 8 warps ("after prefetch 8w")
  after bn=128    the default with 128-key tiles and 8 warps
  after 1-kernel  the default splits combined by the last block (`one_kernel=True`)
                  (these four at the 4B layout only: each is a compile)
  after mk=N      the default with other least keys per split (--min-keys)
  splits=N        N splits forced (--splits)
and `norm_rope_kv_write` (q/k norm + RoPE + the K/V write) with five half-head walks and
three whole-head walks, with num_warps=2 and with 2-head tiles. Each time is the median over
replays of a `ts.graph()` holding REPS calls, per call; beside it the eager time per call
(host included). A table on stdout (row by row), JSON to argv[1].

    PYTHONPATH=src python3 benchmarks/probes/decode_attention_sizes.py "$OUT/decode_sizes.json"
    ... --splits 4,16 --min-keys 128     (more candidates)   --smoke   (CPU, tiny, untimed)
"""
import json
import math
import sys
import time

import torch

import tilesafe as ts
from tilesafe.kernels import norm_rope_kv as nrk
from tilesafe.kernels.paged_kv import paged_decode_attention, paged_decode_workspace

MODELS = {"0.6B": (16, 8), "4B": (32, 8), "32B": (64, 8)}
EXTRA = ("4B", "tiny")           # the head layouts that also time the variants
D, BS, MAX_LEN, REPS = 128, 16, 8192, 10
BATCHES, CONTEXTS = (1, 8, 32), (128, 1024, 4096)


def cache(b, ctx, hkv, device, dtype):
    per = -(-ctx // BS)
    kc, vc = (torch.randn(b * per + 1, BS, hkv, D, device=device).to(dtype) for _ in range(2))
    tables = torch.randperm(b * per + 1, device=device)[:b * per].reshape(b, per).to(torch.int32)
    return kc, vc, tables


def oracle(q, kc, vc, tables, ctx):
    """float32 attention of each sequence's query heads over its first ctx positions, by KV head."""
    b, h, d = q.shape
    hkv = kc.shape[2]
    slots = (tables.long()[:, :, None] * BS + torch.arange(BS, device=q.device)).reshape(b, -1)[:, :ctx]
    k = kc.reshape(-1, hkv, d)[slots].float().transpose(1, 2)                   # (B, HKV, ctx, D)
    v = vc.reshape(-1, hkv, d)[slots].float().transpose(1, 2)
    qg = q.float().reshape(b, hkv, h // hkv, d)                                 # (B, HKV, G, D)
    p = torch.softmax(qg @ k.transpose(2, 3) / math.sqrt(d), -1)                # (B, HKV, G, ctx)
    return (p @ v).reshape(b, h, d)


def timed(call, device) -> tuple[float, float]:
    """(graph us per call, eager us per call)."""
    call()
    if device == "cpu":
        return float("nan"), float("nan")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(REPS):
        call()
    torch.cuda.synchronize()
    eager = (time.perf_counter() - t0) / REPS * 1e6
    with ts.graph() as g:
        for _ in range(REPS):
            call()
    times = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / REPS)
    return sorted(times)[len(times) // 2], eager


def attention_candidates(q, kc, ctx, extra, splits_list, min_keys_list):
    rows = q.shape[0] * kc.shape[2]
    old = max(1, min(-(-MAX_LEN // 64), -(-256 // rows)))
    ws = paged_decode_workspace(q, kc, max_len=MAX_LEN)
    out = {"before": (paged_decode_workspace(q, kc, splits=old), {"one_kernel": False, "min_keys": 64}),
           "after": (ws, None)}
    if ctx <= 1024:                                  # one block per row walks every tile: 160 us at 4096 keys
        out["single"] = (paged_decode_workspace(q, kc, splits=1), None)
    if extra:                                        # the variants, at one head layout (each is a compile)
        out["after prefetch"] = (ws, {"prefetch": True})
        out["after prefetch 8w"] = (ws, {"prefetch": True, "num_warps": 8})
        out["after bn=128"] = (ws, {"block_n": 128, "num_warps": 8})
        if ws.splits > 1:
            out["after 1-kernel"] = (ws, {"one_kernel": True})
    for mk in min_keys_list:
        out[f"after mk={mk}"] = (ws, {"min_keys": mk})
    for s in splits_list:
        out[f"splits={s}"] = (paged_decode_workspace(q, kc, splits=s), None)
    return out


def attention_rows(model, b, ctx, device, dtype, splits_list, min_keys_list):
    h, hkv = MODELS[model]
    kc, vc, tables = cache(b, ctx, hkv, device, dtype)
    q = torch.randn(b, h, D, device=device).to(dtype)
    lens = torch.full((b,), ctx, dtype=torch.int32, device=device)
    want = oracle(q, kc, vc, tables, ctx)
    out = torch.empty_like(q)
    rows = []
    for name, (ws, cfg) in attention_candidates(q, kc, ctx, model in EXTRA, splits_list, min_keys_list).items():
        def call(ws=ws, cfg=cfg):
            paged_decode_attention(q, kc, vc, tables, lens, out=out, workspace=ws, config=cfg)
        try:
            out.fill_(float("nan"))
            call()
            err = (out.float() - want).abs().max().item()
            if not err < 3e-2:
                raise AssertionError(f"max error {err}")
            graph_us, eager_us = timed(call, device)
        except Exception as e:                      # one failing candidate is reported, not fatal
            rows.append(dict(kind="attention", model=model, batch=b, context=ctx, candidate=name, error=repr(e)))
            continue
        rows.append(dict(kind="attention", model=model, batch=b, context=ctx, candidate=name, splits=ws.splits,
                         graph_us=graph_us, eager_us=eager_us, max_error=err))
    return rows


def prologue_rows(model, b, device, dtype):
    h, hkv = MODELS[model]
    qkv = torch.randn(b, h + 2 * hkv, D, device=device).to(dtype)
    q, k, v = qkv[:, :h], qkv[:, h:h + hkv], qkv[:, h + hkv:]
    w = torch.rand(D, device=device).to(dtype) + 0.5
    positions = torch.randint(0, 4096, (b,), dtype=torch.int32, device=device)
    kc, vc = (torch.zeros(b, 64, hkv, D, device=device, dtype=dtype) for _ in range(2))
    slots = (torch.arange(b, device=device, dtype=torch.int32) * 64 + 7)
    q_out = torch.empty(b, h, D, device=device, dtype=dtype)
    default = nrk.WHOLE_HEADS_FROM
    rows = []
    forms = {"5 walks": (1 << 30, None), "3 walks": (1, None), "5 walks w2": (1 << 30, {"num_warps": 2}),
             "3 walks w2": (1, {"num_warps": 2}), "3 walks bh2": (1, {"block_h": 2})}
    for name, (whole_from, cfg) in forms.items():
        def call(cfg=cfg):
            nrk.norm_rope_kv_write(q, k, v, w, w, positions, slots, kc, vc, q_out=q_out, config=cfg)
        nrk.WHOLE_HEADS_FROM = whole_from
        try:
            graph_us, eager_us = timed(call, device)
            rows.append(dict(kind="norm_rope_kv", model=model, batch=b, candidate=name, graph_us=graph_us,
                             eager_us=eager_us))
        except Exception as e:
            rows.append(dict(kind="norm_rope_kv", model=model, batch=b, candidate=name, error=repr(e)))
        finally:
            nrk.WHOLE_HEADS_FROM = default
    return rows


def ints(argv, flag):
    return [int(x) for x in argv[argv.index(flag) + 1].split(",")] if flag in argv else []


def show(rows):
    """Print each row as it is measured (a run cut short still shows what it timed)."""
    for r in rows:
        where = f"{r['kind']:13s} {r['model']:5s} B={r['batch']:3d} " + \
            (f"ctx={r['context']:5d}" if "context" in r else " " * 9)
        if "error" in r:
            print(f"{where} {r['candidate']:14s} FAILED {r['error'][:100]}", flush=True)
        else:
            extra = f" splits={r['splits']:3d}" if "splits" in r else ""
            print(f"{where} {r['candidate']:14s} graph {r['graph_us']:7.2f} us  eager {r['eager_us']:8.1f} us{extra}",
                  flush=True)
    return rows


def main(argv):
    global D, BS, MAX_LEN, MODELS, BATCHES, CONTEXTS
    smoke = "--smoke" in argv
    splits_list, min_keys_list = ints(argv, "--splits"), ints(argv, "--min-keys")
    paths = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] not in
                                                                          ("--splits", "--min-keys"))]
    if smoke:
        D, BS, MAX_LEN, MODELS, BATCHES, CONTEXTS = 16, 4, 64, {"tiny": (4, 2)}, (1, 2), (5, 40)
        device, dtype = "cpu", torch.float32
    else:
        device, dtype = "cuda", torch.bfloat16
    rows = []
    with ts.backend("reference" if smoke else "triton"):
        for model in MODELS:
            for b in BATCHES:
                for ctx in CONTEXTS:
                    rows += show(attention_rows(model, b, ctx, device, dtype, splits_list, min_keys_list))
                rows += show(prologue_rows(model, b, device, dtype))
                torch.cuda.empty_cache() if device == "cuda" else None
    if paths:
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        with open(paths[0], "w") as f:
            json.dump({"gpu": gpu, "head_dim": D, "block_size": BS, "max_len": MAX_LEN, "reps": REPS, "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
