"""Probe: does an L2 prefetch before the PDL wait (`ts.prefetch`) shorten a batch-1 decode?

1. The decode GEMVs of a real Qwen3 shape (random bf16 weights, 0.02 scale), per layer
   qkv = linear(x, Wqkv), res += linear(attn, Wo), gu = linear(x, Wgu),
   res += silu_mul_linear(gu, Wd) — the engine's one-row step without attention and norms
   — for every layer, captured in one graph: without PDL, with PDL, and with PDL plus each
   GEMV block prefetching the first P K tiles of its weight slab before its wait
   (matmul.GEMV_L2_PREFETCH = P; "all" = the whole slab; "keep": with L2 evict-last
   priority, GEMV_L2_KEEP). Each variant is first run eagerly
   for layer 0 and checked against float32 torch; every graph's result must equal the
   plain graph's bit for bit (a prefetch changes no value). GPU time per replay with the
   host enqueue hidden behind a GPU sleep, and the HBM bandwidth of the weights read.
2. The engine's batch-1 decode step (LLM.from_random, greedy) captured without PDL, with
   PDL, and with PDL plus the best P of part 1: GPU time per step, tokens equal.
Parts are skipped once BUDGET_S seconds have passed; every case catches its own errors.
    PYTHONPATH=src python3 benchmarks/probes/pdl_prefetch_probe.py "$OUT/dec/prefetch.json" 4b,0.6b
(argv[3]: the variants, e.g. "plain,pdl,P2keep,P4keep"; argv[4]: the engine sizes, default the first)
"""
import importlib
import json
import sys
import time
import traceback

import torch

import tilesafe as ts
import tilesafe.kernels as tk

MM = importlib.import_module("tilesafe.kernels.matmul")
T0 = time.perf_counter()
BUDGET_S = 60.0
ALL = 1 << 20
SHAPES = {  # hidden E, q heads x head_dim, kv heads x head_dim, intermediate I, layers
    "tiny": (64, 4 * 16, 2 * 16, 96, 2),     # a CPU dry run of the checks
    "0.6b": (1024, 16 * 128, 8 * 128, 3072, 28),
    "4b": (2560, 32 * 128, 8 * 128, 9728, 36),
    "8b": (4096, 32 * 128, 8 * 128, 12288, 36),
}
# Variants, most telling first (the budget may stop the last): "plain", "pdl", and "P<n>" /
# "all" (with PDL, n weight tiles / the whole slab prefetched), "keep" appended for evict-last.
DEFAULT_VARIANTS = "plain,pdl,P2,P2keep,all,P8keep,P4,P1"


def variant(name: str) -> tuple:
    """(case name, pdl, P, keep) of a variant's name."""
    if name in ("plain", "pdl"):
        return name, name == "pdl", 0, False
    keep = name.endswith("keep")
    p = name[:-4] if keep else name
    return "pdl+" + name, True, ALL if p == "all" else int(p[1:]), keep


VARIANTS = [variant(v) for v in DEFAULT_VARIANTS.split(",")]


def left() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


def reset_plans() -> None:
    """Call plans record a call's launch arguments (GEMV_L2_PREFETCH among them): start over."""
    for name in dir(tk):
        plans = getattr(getattr(tk, name), "plans", None)
        if plans is not None:
            plans.plans.clear()


def gpu_ms(replay, n=20) -> float:
    for _ in range(3):
        replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(400_000_000)           # the host queues the replays while the GPU sleeps
    s.record()
    for _ in range(n):
        replay()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


class Chain:
    def __init__(self, size: str, device: str = "cuda", dtype=torch.bfloat16):
        e, hq, hkv, inter, layers = SHAPES[size]
        g = torch.Generator(device=device).manual_seed(0)

        def w(n, k):
            return (torch.randn(layers, n, k, device=device, generator=g) * 0.02).to(dtype)
        self.layers = layers
        self.wqkv, self.wo = w(hq + 2 * hkv, e), w(e, hq)
        self.wgu, self.wd = w(2 * inter, e), w(e, inter)
        self.bytes = sum(t.numel() * 2 for t in (self.wqkv, self.wo, self.wgu, self.wd))
        self.x = torch.randn(1, e, device=device, generator=g).to(dtype)
        self.attn = torch.randn(1, hq, device=device, generator=g).to(dtype)
        self.res0 = torch.randn(1, e, device=device, generator=g).to(dtype)
        self.res = self.res0.clone()
        self.qkv = torch.empty(1, hq + 2 * hkv, device=device, dtype=dtype)
        self.gu = torch.empty(1, 2 * inter, device=device, dtype=dtype)

    def run(self, layers=None):
        for i in range(self.layers if layers is None else layers):
            tk.linear(self.x, self.wqkv[i], out=self.qkv)
            tk.linear(self.attn, self.wo[i], residual=self.res, out=self.res)
            tk.linear(self.x, self.wgu[i], out=self.gu)
            tk.silu_mul_linear(self.gu, self.wd[i], residual=self.res, out=self.res)

    def check_layer0(self) -> float:
        """Max error of layer 0's outputs against float32 torch, relative to their scale."""
        self.res.copy_(self.res0)
        self.run(layers=1)
        if self.res.is_cuda:
            torch.cuda.synchronize()
        f, d = (lambda t: t.float()), self.res.dtype
        qkv = f(self.x) @ f(self.wqkv[0]).T
        r = f(self.res0) + (f(self.attn) @ f(self.wo[0]).T).to(d).float()
        r = r.to(d).float()
        gu = (f(self.x) @ f(self.wgu[0]).T).to(d).float()
        half = gu.shape[1] // 2
        act = (gu[:, :half] * torch.sigmoid(gu[:, :half]) * gu[:, half:]).to(d).float()
        r = r + (act @ f(self.wd[0]).T).to(d).float()
        errs = [((f(self.qkv) - qkv).abs().max() / qkv.abs().max()).item(),
                ((f(self.gu) - gu).abs().max() / gu.abs().max()).item(),
                ((f(self.res) - r).abs().max() / r.abs().max()).item()]
        return max(errs)


def chain_case(ch: Chain, name: str, pdl: bool, p: int, keep: bool, ref_out):
    MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP = p, keep
    reset_plans()
    with ts.pdl(pdl):
        err = ch.check_layer0()                  # also compiles this variant outside the capture
        ch.run()
    torch.cuda.synchronize()
    with ts.graph(pdl=pdl) as g:
        ch.run()
    ch.res.copy_(ch.res0)
    g.replay()
    torch.cuda.synchronize()
    out = ch.res.clone()
    same = bool(torch.equal(out, ref_out)) if ref_out is not None else True
    ms = gpu_ms(g.replay)
    del g
    return {"case": name, "pdl": pdl, "P": "all" if p == ALL else p, "keep": keep, "layer0_rel_err": round(err, 5),
            "same_as_plain": same, "gpu_ms": round(ms, 4), "TB_s": round(ch.bytes / ms / 1e9, 3)}, out


def chain_probe(size: str) -> list:
    rows = []
    try:
        ch = Chain(size)
    except Exception as e:
        return [{"case": f"{size} setup", "error": repr(e)}]
    ref = None
    for name, pdl, p, keep in VARIANTS:
        if left() < 0 and rows:
            rows.append({"size": size, "case": name, "skipped": "budget"})
            continue
        t = time.perf_counter()
        try:
            row, out = chain_case(ch, name, pdl, p, keep, ref)
            if ref is None:
                ref = out
        except Exception as e:
            row = {"case": name, "error": repr(e), "trace": traceback.format_exc()[-1500:]}
        row["size"], row["wall_s"] = size, round(time.perf_counter() - t, 1)
        rows.append(row)
        print("chain", row, flush=True)
    MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP = 0, False
    del ch
    torch.cuda.empty_cache()
    return rows


def engine_probe(size: str, best: tuple) -> list:
    from tilesafe.engine import LLM, SamplingParams
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, progress=False)
    prompt = [{"prompt_token_ids": [1, 2, 3, 4] * 8}]
    params = SamplingParams(max_tokens=8, temperature=0.0)
    steps = llm.decode_steps
    rows, first = [], None
    cases = (("plain", False, 0, False), ("pdl", True, 0, False), ("pdl+" + best[0], True) + best[1:])
    for name, pdl, p, keep in cases:
        if left() < -30 and rows:
            rows.append({"size": size, "case": "engine " + name, "skipped": "budget"})
            continue
        t = time.perf_counter()
        try:
            MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP = p, keep
            reset_plans()
            steps.pdl, steps.steps = pdl, {}
            tokens = llm.generate(prompt, params)[0].outputs[0].token_ids
            first = tokens if first is None else first
            step = steps.steps[1]
            g = next(iter(step.graphs.values()))
            ms = gpu_ms(g.replay)
            row = {"case": "engine " + name, "pdl": pdl, "P": "all" if p == ALL else p, "keep": keep,
                   "gpu_ms": round(ms, 4), "same_tokens": tokens == first}
        except Exception as e:
            row = {"case": "engine " + name, "error": repr(e), "trace": traceback.format_exc()[-1500:]}
        row["size"], row["wall_s"] = size, round(time.perf_counter() - t, 1)
        rows.append(row)
        print("engine", row, flush=True)
    MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP = 0, False
    del llm
    torch.cuda.empty_cache()
    return rows


def best_of(rows) -> tuple:
    """(name, P, keep) of the fastest prefetching chain variant whose result was right."""
    timed = [r for r in rows if "gpu_ms" in r and r.get("P") and r.get("same_as_plain")]
    if not timed:
        return ("P2", 2, False)
    best = min(timed, key=lambda r: r["gpu_ms"])
    return best["case"].split("+")[-1], ALL if best["P"] == "all" else best["P"], best["keep"]


def main():
    sizes = [s for s in (sys.argv[2] if len(sys.argv) > 2 else "4b,0.6b").split(",") if s]
    if len(sys.argv) > 3:                        # argv[3]: the variants, e.g. "plain,pdl,P2keep,P4keep"
        VARIANTS[:] = [variant(v) for v in sys.argv[3].split(",") if v]
    engine_sizes = sys.argv[4].split(",") if len(sys.argv) > 4 else sizes[:1]   # argv[4]: engine sizes
    res = {"device": torch.cuda.get_device_name(), "chain": [], "engine": []}
    for i, size in enumerate(sizes):            # the first size's chain, then its engine step, then the others'
        if i and left() < 0:
            res["chain"].append({"size": size, "case": "chain", "skipped": "budget"})
            continue
        res["chain"] += chain_probe(size)
        if size in engine_sizes and (i == 0 or left() > -20):
            try:
                res["engine"] += engine_probe(size, best_of([r for r in res["chain"] if r.get("size") == size]))
            except Exception as e:
                res["engine"].append({"size": size, "error": repr(e), "trace": traceback.format_exc()[-1500:]})
    res["wall_s"] = round(time.perf_counter() - T0, 1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)
    print(f"\n{'size':>5} {'case':<18} {'P':>4} {'gpu ms':>8} {'TB/s':>6} {'err':>8} {'same':>5} {'wall s':>6}")
    for r in res["chain"] + res["engine"]:
        if "gpu_ms" in r:
            same = r.get("same_as_plain", r.get("same_tokens"))
            print(f"{r['size']:>5} {r['case']:<18} {str(r['P']):>4} {r['gpu_ms']:>8.4f} {r.get('TB_s', ''):>6} "
                  f"{r.get('layer0_rel_err', ''):>8} {str(same):>5} {r['wall_s']:>6}")
        else:
            print(f"{r.get('size', ''):>5} {r.get('case', ''):<18} {r.get('error', r.get('skipped', ''))[:90]}")
    print("wall", res["wall_s"], "s")


if __name__ == "__main__":
    main()
