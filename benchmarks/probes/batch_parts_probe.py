"""Probe: the batched decode step's parts that grow with the batch (round 1 of session 18's
batch_decode_probe: at B = 128 the paged attention ran 56.6 us a layer at 1.9 TB/s, the q/k
norm + RoPE + KV write 10.7 us at any B >= 8 against 3.9 at one row, the split combine 6.9 us
at B = 8), each timed alone over the model's 36 layers (each layer its own cache and weights,
so L2 holds none) inside one `ts.graph()`, then the whole step with each part's fastest config.

One random Qwen3-4B engine (bf16, 128 slots of MAX_LEN, every row at cache length CONTEXT);
until BATCH_BUDGET_S (default 80 s) is spent, per B in argv[2] (default 128,32,8) in turn:
1. attn: `paged_decode_attention` at B in BATCHES with ATTN configs (schedule, key tile,
   prefetch, splits, one kernel), each checked against the default's output;
2. rope: `norm_rope_kv_write` at B with ROPE tiles (tokens x heads per tile);
3. steps: per B the engine's greedy step (PDL graph, GPU time), as committed and with the
   fastest attention and rope configs of parts 1-2 patched in (`paged_kv._paged_config`,
   `attention_model.paged_splits`, the "rope" GPU defaults);
4. gemm: the o, down and qkv projections at M in BATCH_GEMM_M (default 32,8,128) with a few
   configs beside the default, each in one graph over the 36 layers' weights, checked
   against torch.
Every case catches its own errors; a short table at the end; argv[1] is the JSON written.
    PYTHONPATH=src python3 benchmarks/probes/batch_parts_probe.py "$OUT/parts.json" 128,32,8
"""
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.engine import LLM
from tilesafe.engine.checkpoint import weight_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))       # benchmarks/: decode_profile

import decode_profile as dp  # noqa: E402
from queued_ms import queued_ms  # noqa: E402  (benchmarks/probes/, the script's folder)

T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("BATCH_BUDGET_S", "80"))
CONTEXT, MAX_LEN, HBM = 200, 256, 4.8e12
SLEEP = 60_000_000
GEMM_M = [int(m) for m in os.environ.get("BATCH_GEMM_M", "32,8,128").split(",") if m]
PK = importlib.import_module("tilesafe.kernels.paged_kv")
AM = importlib.import_module("tilesafe.kernels.attention_model")
CONFIGS = importlib.import_module("tilesafe.kernels.configs")
NRK = importlib.import_module("tilesafe.kernels.norm_rope_kv")
# (name, paged_decode_attention config, splits (None: the workspace's default))
# Since these ran, the defaults hold the winners (attention_model.paged_rule, norm_rope_kv.step_tiles):
# "default" below is that rule now, the others are configs given explicitly.
ATTN = {128: [("default", None, None), ("bn128", {"block_n": 128}, None), ("w8", {"num_warps": 8}, None),
              ("bn32", {"block_n": 32}, None), ("s2", None, 2), ("nopf", {"prefetch": False}, None),
              ("bn128w8", {"block_n": 128, "num_warps": 8}, None)],
        32: [("default", None, None), ("bn128", {"block_n": 128}, None), ("s2", None, 2),
             ("w8", {"num_warps": 8}, None), ("bn32", {"block_n": 32}, None)],
        8: [("default", None, None), ("s1", None, 1), ("s2", None, 2), ("1k", {"one_kernel": True}, None),
            ("s1bn128", {"block_n": 128}, 1)]}
# (block_t, block_h, num_warps): the "rope" family's GPU default is (4, 8, 4)
ROPE = [(4, 8, 4), (1, 2, 4), (1, 4, 4), (2, 4, 4), (2, 2, 4), (1, 8, 4)]


def left() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


def gpu_ms(fn, n: int = 20) -> float:
    return queued_ms(fn, n, warm=2, sleep_cycles=SLEEP)


def graph_us(run) -> float:
    """GPU us of `run` (tilesafe launches only), run once eagerly (compiling) then captured."""
    run()
    torch.cuda.synchronize()
    with ts.graph(pdl=False) as g:
        run()
    return gpu_ms(g.replay) * 1e3


def guarded(rows: list, label: str, fn):
    if left() < 0:
        rows.append({"case": label, "skipped": "budget"})
        return None
    try:
        r = fn()
    except Exception as e:
        r = {"case": label, "error": repr(e)[:400], "trace": traceback.format_exc()[-1200:]}
    print(label, {k: v for k, v in r.items() if k != "trace"}, flush=True)
    rows.append(r)
    return r


def kv_bytes(cfg, b: int) -> int:
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2 * CONTEXT * b


class Parts:
    """The inputs of one batch's attention and rope calls over every layer."""

    def __init__(self, llm, b: int):
        cfg, dev = llm.config, llm.model.cache.k[0].device
        self.llm, self.b, self.cfg = llm, b, cfg
        h, kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cache = llm.model.cache
        self.q = torch.randn(b, h, d, dtype=self.cache.k[0].dtype, device=dev)
        self.tables = torch.arange(b, dtype=torch.int32, device=dev).view(b, 1)
        self.lens = torch.full((b,), CONTEXT, dtype=torch.int32, device=dev)
        self.out = torch.empty(b, h, d, dtype=self.cache.k[0].dtype, device=dev)
        self.qkv = torch.randn(b, (h + 2 * kv) * d, dtype=self.cache.k[0].dtype, device=dev)
        self.positions = torch.full((b,), CONTEXT - 1, dtype=torch.int32, device=dev)
        self.slots = torch.arange(b, dtype=torch.int32, device=dev) * MAX_LEN + CONTEXT - 1
        self.q_out = torch.empty(b, h, d, dtype=self.cache.k[0].dtype, device=dev)

    def attn(self, config, splits) -> tuple[float, torch.Tensor, int]:
        ws = tk.paged_decode_workspace(self.q, self.cache.k[0], max_len=MAX_LEN, splits=splits)

        def run():
            for n in range(self.cfg.num_layers):
                tk.paged_decode_attention(self.q, self.cache.k[n], self.cache.v[n], self.tables, self.lens,
                                          out=self.out, workspace=ws, config=config)
        us = graph_us(run) / self.cfg.num_layers
        return us, self.out.float().clone(), ws.splits

    def rope(self, bt: int, bh: int, warps: int) -> tuple[float, torch.Tensor]:
        cfg, w = self.cfg, self.llm.model.w
        hd, kvd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        q = self.qkv[:, :hd].view(self.b, cfg.num_heads, cfg.head_dim)
        k = self.qkv[:, hd:hd + kvd].view(self.b, cfg.num_kv_heads, cfg.head_dim)
        v = self.qkv[:, hd + kvd:].view(self.b, cfg.num_kv_heads, cfg.head_dim)
        conf = {"block_t": bt, "block_h": bh, "num_warps": warps}

        def run():
            for n in range(cfg.num_layers):
                layer = w.layers[n]
                tk.norm_rope_kv_write(q, k, v, layer.q_norm, layer.k_norm, self.positions, self.slots,
                                      self.cache.k[n], self.cache.v[n], cfg.rms_norm_eps, cfg.rope_theta,
                                      q_out=self.q_out, config=conf)
        us = graph_us(run) / cfg.num_layers
        return us, self.q_out.float().clone()


def attn_cases(parts: Parts, rows: list) -> None:
    ref = None
    attn_bytes = kv_bytes(parts.cfg, parts.b) / parts.cfg.num_layers
    for name, config, splits in ATTN.get(parts.b, ATTN[32]):
        def one(name=name, config=config, splits=splits):
            nonlocal ref
            us, out, s = parts.attn(config, splits)
            if ref is None:
                ref = out
            err = (out - ref).abs().max().item()
            return {"part": "attn", "batch": parts.b, "name": name, "config": config, "splits": s, "us": round(us, 2),
                    "TB_s": round(attn_bytes / us / 1e6, 3), "max_diff": round(err, 5), "ok": err < 2e-2}
        guarded(rows, f"attn B={parts.b} {name}", one)


def rope_cases(parts: Parts, rows: list) -> None:
    ref = None
    for bt, bh, warps in ROPE:
        def one(bt=bt, bh=bh, warps=warps):
            nonlocal ref
            us, out = parts.rope(bt, bh, warps)
            if ref is None:
                ref = out
            err = (out - ref).abs().max().item()
            return {"part": "rope", "batch": parts.b, "tiles": [bt, bh, warps], "us": round(us, 2),
                    "max_diff": round(err, 5), "ok": err < 2e-2}
        guarded(rows, f"rope B={parts.b} {bt}x{bh} w{warps}", one)


def gemm_candidates(m: int) -> list:
    """(name, config) for `tk.linear` at m rows: None is the default (tuned table / model)."""
    if m <= 16:
        one = {"num_warps": 4, "min_blocks": 1, "split_k": 1}
        return [("default", None), ("bn64k128s5", dict(one, block_n=64, block_k=128, num_stages=5)),
                ("bn32k256s5", dict(one, block_n=32, block_k=256, num_stages=5)),
                ("bn32k128s4sk2", dict(one, block_n=32, block_k=128, num_stages=4, split_k=2)),
                ("bn16k256s5", dict(one, block_n=16, block_k=256, num_stages=5))]
    bm = max(16, 1 << (m - 1).bit_length())
    base = {"block_m": bm, "num_warps": 4, "tail_split": False, "persistent": False}
    return [("default", None),
            ("n64k128s4sk3", dict(base, block_n=64, block_k=128, num_stages=4, split_k=3)),
            ("n128k128s4sk3", dict(base, block_n=128, block_k=128, num_stages=4, split_k=3)),
            ("n64k128s4sk3_1k", dict(base, block_n=64, block_k=128, num_stages=4, split_k=3, one_kernel=True)),
            ("n32k128s4sk2_1k", dict(base, block_n=32, block_k=128, num_stages=4, split_k=2, one_kernel=True)),
            ("n64k64s6", dict(base, block_n=64, block_k=64, num_stages=6, split_k=1))]


def gemm_cases(llm, m: int, rows: list) -> None:
    """o, down and qkv (the 36 layers' weights in turn) at m rows, in one graph per config."""
    w = llm.model.w
    for name in ("o", "down", "qkv"):
        ws = [getattr(layer, name) for layer in w.layers]
        n, k = ws[0].shape
        xs = [torch.randn(m, k, dtype=ws[0].dtype, device=ws[0].device) for _ in ws]
        outs = [torch.empty(m, n, dtype=ws[0].dtype, device=ws[0].device) for _ in ws]
        ref = torch.matmul(xs[0], ws[0].t()).float()
        for cname, config in gemm_candidates(m):
            def one(config=config, cname=cname):
                def run():
                    for x, wt, o in zip(xs, ws, outs):
                        tk.linear(x, wt, out=o, config=config)
                us = graph_us(run) / len(ws)
                err = (outs[0].float() - ref).abs().max().item() / max(1e-6, ref.abs().max().item())
                return {"part": "gemm", "batch": m, "weight": name, "name": cname, "config": config,
                        "us": round(us, 2), "TB_s": round(n * k * 2 / us / 1e6, 3), "max_diff": round(err, 5),
                        "ok": err < 2e-2}
            guarded(rows, f"gemm {name} M={m} {cname}", one)


def best(rows: list, part: str, b: int):
    ok = [r for r in rows if r.get("part") == part and r.get("batch") == b and r.get("ok")]
    return min(ok, key=lambda r: r["us"]) if ok else None


def reset_plans() -> None:
    for name in dir(tk):
        plans = getattr(getattr(tk, name), "plans", None)
        if plans is not None:
            plans.plans.clear()


def step_case(llm, b: int, attn=None, rope=None) -> dict:
    """The engine's greedy step at batch b, captured afresh (PDL), with `attn` / `rope` (rows of
    parts 1-2) patched in."""
    steps, cfg = llm.decode_steps, llm.config
    saved_cfg, saved_splits, saved_few = PK._paged_config, AM.paged_splits, NRK.FEW_TOKENS
    saved_rope = dict(CONFIGS.GPU_DEFAULTS["rope"])
    steps.steps.pop(b, None)
    try:
        if attn is not None:
            extra = attn["config"] or {}
            PK._paged_config = lambda fn, config, base=saved_cfg: {**base(fn, config), **extra}
            if attn["splits"] is not None:
                AM.paged_splits = lambda *args, s=attn["splits"]: s
        if rope is not None:                        # the family's tiles at every token count
            bt, bh, warps = rope["tiles"]
            CONFIGS.GPU_DEFAULTS["rope"].update(block_t=bt, block_h=bh, num_warps=warps)
            NRK.FEW_TOKENS = 1
        reset_plans()
        llm.sampler.greedy[:] = [True] * len(llm.sampler.greedy)
        steps.run(list(range(1000, 1000 + b)), [CONTEXT - 1] * b)
        step = steps.steps[b]
        dp.set_context(step, CONTEXT, llm.max_model_len)
        g = step.graphs.get(True)                  # None on the CPU (a smoke run): the step eagerly
        ms = gpu_ms(g.replay if g is not None else lambda: steps.model.decode(step.a, step.ws, True))
        ideal = (weight_bytes(cfg, 2) + kv_bytes(cfg, b)) / HBM
        return {"part": "step", "batch": b, "attn": attn and attn["name"], "rope": rope and rope["tiles"],
                "splits": step.ws.attention.splits, "gpu_ms": round(ms, 4), "tok_s": round(b / ms * 1e3, 1),
                "roofline": round(ideal / (ms / 1e3), 4)}
    finally:
        PK._paged_config, AM.paged_splits, NRK.FEW_TOKENS = saved_cfg, saved_splits, saved_few
        CONFIGS.GPU_DEFAULTS["rope"].clear()
        CONFIGS.GPU_DEFAULTS["rope"].update(saved_rope)
        reset_plans()
        steps.steps.pop(b, None)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "128,32,8").split(",") if b]
    res = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "context": CONTEXT,
           "rows": []}
    rows = res["rows"]
    size = sys.argv[3] if len(sys.argv) > 3 else "4b"
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=MAX_LEN, max_num_seqs=max(batches),
                          progress=False)
    with torch.inference_mode():
        for n in range(llm.config.num_layers):      # finite keys and values where the rows read them
            llm.model.cache.k[n][:, :CONTEXT].normal_()
            llm.model.cache.v[n][:, :CONTEXT].normal_()
        for b in batches:                           # per batch: its parts, then its step as is and with the best
            try:
                parts = Parts(llm, b)
                attn_cases(parts, rows)
                rope_cases(parts, rows)
                del parts
            except Exception as e:
                rows.append({"batch": b, "error": repr(e)[:400]})
            guarded(rows, f"step B={b}", lambda b=b: step_case(llm, b))
            guarded(rows, f"step B={b} best", lambda b=b: step_case(llm, b, best(rows, "attn", b),
                                                                     best(rows, "rope", b)))
        for m in GEMM_M:
            gemm_cases(llm, m, rows)
    res["wall_s"] = round(time.perf_counter() - T0, 1)
    if out_path:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(res, indent=1, default=str))
    print(f"\ncontext {CONTEXT}, wall {res['wall_s']} s")
    for r in rows:
        if "us" in r:
            print(f"{r['part']:<5} B={r['batch']:<4} {r.get('weight', ''):<5} {str(r.get('name', r.get('tiles'))):<16} "
                  f"{r['us']:>8} us "
                  f"{r.get('TB_s', ''):>7} splits {r.get('splits', '-')} ok {r['ok']} diff {r['max_diff']}")
        elif "gpu_ms" in r:
            print(f"step  B={r['batch']:<4} attn {r['attn']} rope {r['rope']} splits {r['splits']}: "
                  f"{r['gpu_ms']} ms, {r['tok_s']} tok/s, roofline {r['roofline']}")
        else:
            print(r.get("case"), r.get("error", r.get("skipped")))


if __name__ == "__main__":
    main()
