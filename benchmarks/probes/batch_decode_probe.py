"""Probe: the batched decode step (B = 1..128 rows) against the weight-read time (issues 17, 19).

One random Qwen3 engine (bf16, max_num_seqs = the largest batch, contexts of CONTEXT) and, in
order, until BATCH_BUDGET_S (default 85 s) is spent:
1. steps: per batch B the engine's greedy decode step (every row in its own slot at cache
   length CONTEXT), captured as the engine captures it (PDL) and timed on the GPU alone
   (replays queued behind a GPU sleep): ms, summed tokens/s, and the roofline fraction of
   weights + the batch's KV over the step (issue 19's count) and of the weights alone;
2. profiles: the per-kernel profile of the step at the batches in BATCH_PROFILE (default
   8,32,128; `benchmarks/decode_profile.py` at batch B: captured without PDL, each kernel's
   own time against its bytes, summed by kind; per layer position);
   then the step variants of BATCH_VARIANTS (see SWITCHES below; default fused@8), timed as in 1;
3. gemms, per M of BATCH_CAND_M (default 8,64,32,128, in that order): each projection of the
   model (qkv, o, gate_up, down: the 36 layers' weights in turn, as a step reads them, so L2
   holds none; the LM head): `tk.linear` with its default config against cuBLAS and against
   the weight bytes at 4.8 TB/s, then a few other configs (`candidates`), each checked against
   cuBLAS before it is timed (BATCH_GEMMS=0 skips this part).
Every case catches its own errors. Prints a short table at the end (and a JSON line of the
profiles); argv[1] is the JSON written.
    PYTHONPATH=src python3 benchmarks/probes/batch_decode_probe.py "$OUT/batch.json" 4b 1,8,32,64,128
"""
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))       # benchmarks/: decode_profile

import decode_profile as dp  # noqa: E402
from queued_ms import queued_ms  # noqa: E402  (benchmarks/probes/, the script's folder)

import tilesafe.kernels as tk  # noqa: E402
from tilesafe.engine import LLM  # noqa: E402
from tilesafe.engine.checkpoint import weight_bytes  # noqa: E402

T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("BATCH_BUDGET_S", "85"))
CONTEXT = 200
MAX_LEN = 256
HBM = dp.HBM
PROFILE = [int(b) for b in os.environ.get("BATCH_PROFILE", "8,32,128").split(",") if b]
VARIANT_NAMES = [v for v in os.environ.get("BATCH_VARIANTS", "fused@8").split(",") if v]
GEMMS = os.environ.get("BATCH_GEMMS", "1") == "1"          # part 3 (0: skip it)
CAND_M = [int(b) for b in os.environ.get("BATCH_CAND_M", "8,64,32,128").split(",") if b]
SLEEP = 60_000_000                       # GPU cycles (~30 ms): the host queues a timed loop meanwhile


def left() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


def gpu_ms(fn, n: int = 20) -> float:
    """GPU ms per call of `fn`, the calls queued behind a GPU sleep (host cost hidden)."""
    return queued_ms(fn, n, warm=2, sleep_cycles=SLEEP)


def kv_bytes(cfg, batch: int) -> int:
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * CONTEXT * batch


# Step variants, "<kind>@<batch>", timed after the plain steps:
#   fused@B  the fused layer (norms and SiLU-mul as GEMV prologues, residual epilogues) at B <= 16
#            rows, in the tensor-core form (session 15 measured it 2-4x slower per layer with the
#            norm's pass before the loop; the late norm has replaced that pass since);
#   table@B  the tuned table with BATCH_TABLE's entries (JSON {family: {shape class: config}}, or
#            the file BATCH_TABLE_FILE names) added or replaced, e.g. configs for the model's
#            weights at M = B.
MODEL = importlib.import_module("tilesafe.engine.model")
CONFIGS = importlib.import_module("tilesafe.kernels.configs")
SWITCHES = {"fused": {(MODEL, "FUSED_ROWS"): 16}, "table": {}}
TABLE = json.loads(Path(os.environ["BATCH_TABLE_FILE"]).read_text() if os.environ.get("BATCH_TABLE_FILE")
                   else os.environ.get("BATCH_TABLE", "{}"))


def reset_plans() -> None:
    """Call plans keep a call's launch arguments: start over after a switch changes."""
    for name in dir(tk):
        plans = getattr(getattr(tk, name), "plans", None)
        if plans is not None:
            plans.plans.clear()


def patched_table(patch: dict) -> dict:
    """Add `patch`'s entries to the current GPU's tuned table (in memory); returns what they replaced."""
    table = CONFIGS.tuned_table(CONFIGS.gpu_name())
    old = {}
    for family, entries in patch.items():
        fam = table.setdefault(family, {})
        for key, cfg in entries.items():
            old.setdefault(family, {})[key] = fam.get(key)
            fam[key] = cfg
    return old


def restore_table(old: dict) -> None:
    table = CONFIGS.tuned_table(CONFIGS.gpu_name())
    for family, entries in old.items():
        for key, cfg in entries.items():
            if cfg is None:
                table[family].pop(key, None)
            else:
                table[family][key] = cfg


def variant_case(llm, name: str) -> dict:
    kind, b = name.split("@")
    b, changes = int(b), SWITCHES[kind]
    saved = {key: getattr(*key) for key in changes}
    old = patched_table(TABLE) if kind == "table" else {}
    llm.decode_steps.steps.pop(b, None)
    try:
        for (mod, attr), value in changes.items():
            setattr(mod, attr, value)
        reset_plans()
        return {"variant": name, **step_case(llm, b)}
    finally:
        for (mod, attr), value in saved.items():
            setattr(mod, attr, value)
        restore_table(old)
        reset_plans()
        llm.decode_steps.steps.pop(b, None)


def step_case(llm, b: int) -> dict:
    steps, cfg = llm.decode_steps, llm.config
    llm.sampler.greedy[:] = [True] * len(llm.sampler.greedy)         # every row greedy (temperature 0)
    t = time.perf_counter()
    steps.run(list(range(1000, 1000 + b)), [CONTEXT - 1] * b)          # eager (compiles), then captured
    step = steps.steps[b]
    dp.set_context(step, CONTEXT, llm.max_model_len)
    g = step.graphs.get(True)                  # None on the CPU (a smoke run): the step eagerly
    ms = gpu_ms(g.replay if g is not None else lambda: steps.model.decode(step.a, step.ws, True))
    w = weight_bytes(cfg, 2)
    ideal = (w + kv_bytes(cfg, b)) / HBM
    return {"batch": b, "gpu_ms": round(ms, 4), "tok_s": round(b / ms * 1e3, 1),
            "roofline": round(ideal / (ms / 1e3), 4), "weights_roofline": round(w / HBM / (ms / 1e3), 4),
            "kv_MB": round(kv_bytes(cfg, b) / 1e6, 1), "attention_splits": step.ws.attention.splits,
            "wall_s": round(time.perf_counter() - t, 1)}


def brief(p: dict) -> dict:
    out = {"summary": p.get("summary")}
    for part in ("plain", "pdl"):
        if part in p:
            out[part] = {k: p[part].get(k) for k in ("span_us", "own_us", "gap_us", "by_kind", "per_position")}
            out[part]["top"] = dict(list(p[part].get("by_kernel", {}).items())[:10])
            out[part]["last_kernels"] = p[part].get("last_kernels")
    return out


def profile_case(llm, b: int, step_ms: float) -> dict:
    cfg = llm.config
    ideal = (weight_bytes(cfg, 2) + kv_bytes(cfg, b)) / HBM
    p = dp.profile_step(llm, CONTEXT, ideal, step_ms / 1e3, replays=3, batch=b)
    dp.print_profile(f"B={b}", p)
    return brief(p)


def weights_of(llm):
    w = llm.model.w
    return {"qkv": [x.qkv for x in w.layers], "o": [x.o for x in w.layers],
            "gate_up": [x.gate_up for x in w.layers], "down": [x.down for x in w.layers], "lm_head": [w.lm_head]}


def rotating(ws, m: int, call):
    """A function running `call(x, w, out)` over every weight of `ws` once (each its own x, out)."""
    n, k = ws[0].shape
    xs = [torch.randn(m, k, dtype=ws[0].dtype, device=ws[0].device) for _ in ws]
    outs = [torch.empty(m, n, dtype=ws[0].dtype, device=ws[0].device) for _ in ws]

    def run():
        for x, w, o in zip(xs, ws, outs):
            call(x, w, o)
    return run, xs, outs


def gemm_case(name: str, ws, m: int, config=None) -> dict:
    n, k = ws[0].shape
    ideal_us = n * k * 2 / HBM * 1e6
    run_ts, xs, outs = rotating(ws, m, lambda x, w, o: tk.linear(x, w, out=o, config=config))
    run_ts()
    ref = F.linear(xs[0], ws[0]).float()
    err = (outs[0].float() - ref).abs().max().item() / max(1e-6, ref.abs().max().item())
    row = {"weight": name, "m": m, "n": n, "k": k, "config": config, "rel_err": round(err, 5)}
    if err > 2e-2:
        row["error"] = "wrong result"
        return row
    ts_us = gpu_ms(run_ts, 5) * 1e3 / len(ws)
    row.update(ts_us=round(ts_us, 2), ideal_us=round(ideal_us, 2), ideal_over_ts=round(ideal_us / ts_us, 3))
    if config is None:
        run_f, _, _ = rotating(ws, m, lambda x, w, o: torch.matmul(x, w.t(), out=o))
        f_us = gpu_ms(run_f, 5) * 1e3 / len(ws)
        row.update(torch_us=round(f_us, 2), torch_over_ts=round(f_us / ts_us, 3))
    return row


def candidates(m: int) -> list[dict]:
    """Other configs, the likeliest first: narrow column tiles give the 2560-wide outputs more
    blocks than SMs without split-K (N / 32 = 80 blocks leave 52 SMs idle)."""
    if m <= 16:      # the weight-streaming tensor-core path (linear's config family)
        one = {"num_warps": 4, "min_blocks": 1, "split_k": 1}
        return [dict(one, block_n=16, block_k=256, num_stages=4), dict(one, block_n=16, block_k=512, num_stages=3),
                dict(one, block_n=32, block_k=256, num_stages=4, split_k=2, one_kernel=True),
                dict(one, block_m=64, block_n=64, block_k=128, num_stages=4),
                dict(one, block_n=64, block_k=128, num_stages=4)]
    bm = max(16, 1 << (m - 1).bit_length())
    return [{"block_m": bm, "block_n": 16, "block_k": 256, "num_stages": 4, "num_warps": 4, "split_k": 1},
            {"block_m": bm, "block_n": 32, "block_k": 128, "num_stages": 5, "num_warps": 4, "split_k": 1},
            {"block_m": bm, "block_n": 32, "block_k": 128, "num_stages": 4, "num_warps": 4, "split_k": 2,
             "one_kernel": True},
            {"block_m": bm, "block_n": 64, "block_k": 128, "num_stages": 4, "num_warps": 4, "split_k": 1},
            {"block_m": bm, "block_n": 128, "block_k": 64, "num_stages": 4, "num_warps": 4, "split_k": 1}]


def guarded(rows: list, label: str, fn):
    if left() < 0:
        rows.append({"case": label, "skipped": "budget"})
        return None
    try:
        r = fn()
    except Exception as e:
        r = {"case": label, "error": repr(e)[:400], "trace": traceback.format_exc()[-1200:]}
    print(label, {k: v for k, v in r.items() if k not in ("trace", "profile")} if isinstance(r, dict) else r,
          flush=True)
    rows.append(r)
    return r


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    size = sys.argv[2] if len(sys.argv) > 2 else "4b"
    batches = [int(b) for b in (sys.argv[3] if len(sys.argv) > 3 else "1,8,32,64,128").split(",") if b]
    res = {"device": torch.cuda.get_device_name(), "size": size, "context": CONTEXT, "steps": [], "profiles": [],
           "gemms": [], "candidates": []}
    try:
        llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=MAX_LEN,
                              max_num_seqs=max(batches), progress=False)
        res["build_s"] = round(time.perf_counter() - T0, 1)
    except Exception as e:
        res["error"] = repr(e)[:500]
        print(res, flush=True)
        return _write(out_path, res)
    with torch.inference_mode():
        step_ms = {}
        for b in batches:
            r = guarded(res["steps"], f"step B={b}", lambda b=b: step_case(llm, b))
            if r and "gpu_ms" in r:
                step_ms[b] = r["gpu_ms"]
        for b in PROFILE:
            if b in step_ms:
                guarded(res["profiles"], f"profile B={b}",
                        lambda b=b: {"batch": b, "profile": profile_case(llm, b, step_ms[b])})
        for name in VARIANT_NAMES:
            guarded(res["steps"], f"variant {name}", lambda name=name: variant_case(llm, name))
        ws = weights_of(llm)
        for m in CAND_M if GEMMS else []:      # per M: each weight's default, cuBLAS, then the candidates
            for name, w in ws.items():
                guarded(res["gemms"], f"gemm {name} M={m}", lambda name=name, w=w, m=m: gemm_case(name, w, m))
                for c in candidates(m) if name != "lm_head" else []:
                    guarded(res["candidates"], f"cand {name} M={m} {c}",
                            lambda name=name, m=m, c=c: gemm_case(name, w, m, c))
    res["wall_s"] = round(time.perf_counter() - T0, 1)
    _write(out_path, res)
    _table(res)


def _write(path, res) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(res, indent=1, default=str))


def _table(res: dict) -> None:
    print(f"\n{res['size']} context {res['context']}, build {res.get('build_s')} s, wall {res.get('wall_s')} s")
    print(f"{'B':>4} {'gpu ms':>8} {'tok/s':>9} {'roof(w+kv)':>10} {'roof(w)':>8} {'kv MB':>7} {'splits':>6}")
    for r in res["steps"]:
        if "gpu_ms" in r:
            print(f"{r['batch']:>4} {r['gpu_ms']:>8.4f} {r['tok_s']:>9.1f} {r['roofline']:>10.3f} "
                  f"{r['weights_roofline']:>8.3f} {r['kv_MB']:>7} {r['attention_splits']:>6} {r.get('variant', '')}")
        else:
            print(r.get("case"), r.get("error", r.get("skipped")))
    for p in res["profiles"]:
        s = (p.get("profile") or {}).get("summary") or {}
        kinds = ((p.get("profile") or {}).get("plain") or {}).get("by_kind") or {}
        print(f"B={p.get('batch')} plain span {s.get('plain_span_us')} us: " +
              ", ".join(f"{k} {v.get('own_us')} us/{v.get('launches')}" for k, v in kinds.items()) +
              f"; gaps {s.get('plain_gap_us')}" if s else f"{p.get('case')} {p.get('error', p.get('skipped'))}")
    print(f"{'weight':<8} {'M':>4} {'ts us':>8} {'torch us':>8} {'ideal us':>8} {'ideal/ts':>8} {'torch/ts':>8}")
    for r in res["gemms"] + res["candidates"]:
        if "ts_us" in r:
            print(f"{r['weight']:<8} {r['m']:>4} {r['ts_us']:>8} {r.get('torch_us', '-'):>8} {r['ideal_us']:>8} "
                  f"{r['ideal_over_ts']:>8} {r.get('torch_over_ts', '-'):>8} {r['config'] or ''}")
        else:
            print(r.get("case", r.get("weight")), r.get("error", r.get("skipped")))
    print("PROFILES", json.dumps(res["profiles"], default=str))


if __name__ == "__main__":
    main()
