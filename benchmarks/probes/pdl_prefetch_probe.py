"""Probe: does an L2 prefetch before the PDL wait (`ts.prefetch`) shorten a batch-1 decode?

1. The decode GEMVs of a real Qwen3 shape (random bf16 weights, 0.02 scale) as the engine's
   one-row layer runs them, without attention: per layer RMSNorm, qkv = linear(x, Wqkv),
   res += linear(attn, Wo), RMSNorm, gu = linear(x, Wgu), res += silu_mul_linear(gu, Wd),
   for every layer, captured in one graph: without PDL, with PDL, and with PDL plus each GEMV
   block prefetching the first P K tiles of its weight slab before its wait (variants below).
   Each variant is first run eagerly for layer 0 (without the norms) and checked against
   float32 torch; every graph's result must equal the plain graph's bit for bit (a prefetch
   changes no value). GPU time per replay with the host enqueue hidden behind a GPU sleep,
   and the HBM bandwidth of the weights read.
2. The engine's batch-1 greedy decode step (LLM.from_random) captured with each variant:
   GPU time per step, tokens equal to the first variant's.
Variants stop starting once BUDGET_S seconds (plus a margin) have passed; every case catches
its own errors.
    PYTHONPATH=src python3 benchmarks/probes/pdl_prefetch_probe.py "$OUT/dec/prefetch.json" 4b,0.6b
(argv[3]: the variants, e.g. "plain,pdl,P2keep,P4keep-d0"; argv[4]: the engine sizes, default the first)
"""
import contextlib
import importlib
import json
import os
import sys
import time
import traceback

import torch

import tilesafe as ts
import tilesafe.kernels as tk

from queued_ms import queued_ms  # (benchmarks/probes/, the script's folder)

MM = importlib.import_module("tilesafe.kernels.matmul")
T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("DEC_BUDGET_S", "70"))
ALL = 1 << 20
SHAPES = {  # hidden E, q heads x head_dim, kv heads x head_dim, intermediate I, layers
    "tiny": (64, 4 * 16, 2 * 16, 96, 2),     # a CPU dry run of the checks
    "0.6b": (1024, 16 * 128, 8 * 128, 3072, 28),
    "4b": (2560, 32 * 128, 8 * 128, 9728, 36),
    "8b": (4096, 32 * 128, 8 * 128, 12288, 36),
}
# Variants, most telling first (the budget may stop the last): "plain", "pdl", and "P<n>" /
# "all" (with PDL, n weight tiles / the whole slab prefetched), "keep" appended for evict-last,
# "-d<m>" appended for m tiles (instead of n) in the down projection, which follows gate/up's
# 100 MB stream at 4B (lines prefetched that early are evicted before they are read).
DEFAULT_VARIANTS = "plain,pdl,P1,P2,P2keep,P4keep,P2-d0,P2keep-d0,P4keep-d0"


def variant(name: str) -> tuple:
    """(case name, pdl, P, keep, P of the down projection) of a variant's name ("default": PDL
    with the library's own settings, GEMV_L2_PREFETCH and its weight-size limit)."""
    if name == "default":
        return "pdl+default", True, None, None, None
    if name in ("plain", "pdl"):
        return name, name == "pdl", 0, False, 0
    base, _, down = name.partition("-d")
    keep = base.endswith("keep")
    p = base[:-4] if keep else base
    p = ALL if p == "all" else int(p[1:])
    return "pdl+" + name, True, p, keep, int(down) if down else p


@contextlib.contextmanager
def prefetching(p: int, keep: bool, down: int):
    """The library's GEMV prefetch setting for the calls inside; `down` for silu_mul_linear's."""
    plain_down = tk.silu_mul_linear
    if p is None:                                         # the library's defaults
        reset_plans()
        yield
        return

    def down_call(*args, **kwargs):
        MM.GEMV_L2_PREFETCH = down
        try:
            return plain_down(*args, **kwargs)
        finally:
            MM.GEMV_L2_PREFETCH = p
    saved = MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP, MM.GEMV_L2_PREFETCH_BYTES
    MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP, MM.GEMV_L2_PREFETCH_BYTES = p, keep, 1 << 40   # every weight
    if down != p:
        tk.silu_mul_linear = down_call                    # the engine and the chain call it through tk
    reset_plans()
    try:
        yield
    finally:
        tk.silu_mul_linear = plain_down
        MM.GEMV_L2_PREFETCH, MM.GEMV_L2_KEEP, MM.GEMV_L2_PREFETCH_BYTES = saved
        reset_plans()


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
    """GPU ms per replay (queued_ms with a longer sleep: 400M cycles hide a 4B step's host cost)."""
    return queued_ms(replay, n=n, warm=3, sleep_cycles=400_000_000)


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
        self.gn = (1 + 0.1 * torch.randn(layers, 2, e, device=device, generator=g)).to(dtype)
        self.xn = torch.empty(1, e, device=device, dtype=dtype)

    def run(self, layers=None, norms=True):
        """The engine's one-row layer without attention: with `norms` each GEMV but the down
        projection follows a short RMSNorm kernel, as in the engine (PDL overlaps that one)."""
        for i in range(self.layers if layers is None else layers):
            if norms:
                tk.rms_norm(self.res, self.gn[i, 0], 1e-6, out=self.xn)
            tk.linear(self.x, self.wqkv[i], out=self.qkv)
            tk.linear(self.attn, self.wo[i], residual=self.res, out=self.res)
            if norms:
                tk.rms_norm(self.res, self.gn[i, 1], 1e-6, out=self.xn)
            tk.linear(self.x, self.wgu[i], out=self.gu)
            tk.silu_mul_linear(self.gu, self.wd[i], residual=self.res, out=self.res)

    def check_layer0(self) -> float:
        """Max error of layer 0's outputs against float32 torch, relative to their scale."""
        self.res.copy_(self.res0)
        self.run(layers=1, norms=False)
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


def chain_case(ch: Chain, name: str, pdl: bool, p: int, keep: bool, down: int, ref_out):
    with prefetching(p, keep, down):
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
    return {"case": name, "pdl": pdl, "P": "all" if p == ALL else p, "keep": keep, "down": down,
            "layer0_rel_err": round(err, 5), "same_as_plain": same, "gpu_ms": round(ms, 4),
            "TB_s": round(ch.bytes / ms / 1e9, 3)}, out


def chain_probe(size: str) -> list:
    rows = []
    try:
        ch = Chain(size)
    except Exception as e:
        return [{"case": f"{size} setup", "error": repr(e)}]
    ref = None
    for name, pdl, p, keep, down in VARIANTS:
        if left() < -30 and rows:
            rows.append({"size": size, "case": name, "skipped": "budget"})
            continue
        t = time.perf_counter()
        try:
            row, out = chain_case(ch, name, pdl, p, keep, down, ref)
            if ref is None:
                ref = out
        except Exception as e:
            row = {"case": name, "error": repr(e), "trace": traceback.format_exc()[-1500:]}
        row["size"], row["wall_s"] = size, round(time.perf_counter() - t, 1)
        rows.append(row)
        print("chain", row, flush=True)
    del ch
    torch.cuda.empty_cache()
    return rows


def engine_probe(size: str) -> list:
    from tilesafe.engine import LLM, SamplingParams
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, progress=False)
    prompt = [{"prompt_token_ids": [1, 2, 3, 4] * 8}]
    params = SamplingParams(max_tokens=8, temperature=0.0)
    steps = llm.decode_steps
    rows, first = [], None
    for name, pdl, p, keep, down in VARIANTS:
        if left() < -40 and rows:
            rows.append({"size": size, "case": "engine " + name, "skipped": "budget"})
            continue
        t = time.perf_counter()
        try:
            with prefetching(p, keep, down):
                steps.pdl, steps.steps = pdl, {}
                tokens = llm.generate(prompt, params)[0].outputs[0].token_ids
            first = tokens if first is None else first
            g = next(iter(steps.steps[1].graphs.values()))
            ms = gpu_ms(g.replay)
            row = {"case": "engine " + name, "pdl": pdl, "P": "all" if p == ALL else p, "keep": keep, "down": down,
                   "gpu_ms": round(ms, 4), "same_tokens": tokens == first}
        except Exception as e:
            row = {"case": "engine " + name, "error": repr(e), "trace": traceback.format_exc()[-1500:]}
        row["size"], row["wall_s"] = size, round(time.perf_counter() - t, 1)
        rows.append(row)
        print("engine", row, flush=True)
    del llm
    torch.cuda.empty_cache()
    return rows


def main():
    sizes = [s for s in (sys.argv[2] if len(sys.argv) > 2 else "4b,0.6b").split(",") if s]   # chain sizes ("": none)
    if len(sys.argv) > 3:                        # argv[3]: the variants, e.g. "plain,pdl,P2keep,P4keep"
        VARIANTS[:] = [variant(v) for v in sys.argv[3].split(",") if v]
    engine_sizes = [s for s in sys.argv[4].split(",") if s] if len(sys.argv) > 4 else sizes[:1]   # argv[4]
    res = {"device": torch.cuda.get_device_name(), "chain": [], "engine": []}
    for i, size in enumerate(dict.fromkeys(sizes + engine_sizes)):   # each size's chain, then its engine step
        if i and left() < 0:
            res["chain"].append({"size": size, "case": "all", "skipped": "budget"})
            continue
        if size in sizes:
            res["chain"] += chain_probe(size)
        if size in engine_sizes:
            try:
                res["engine"] += engine_probe(size)
            except Exception as e:
                res["engine"].append({"size": size, "error": repr(e), "trace": traceback.format_exc()[-1500:]})
    res["wall_s"] = round(time.perf_counter() - T0, 1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)
    print(f"\n{'size':>5} {'case':<22} {'gpu ms':>8} {'TB/s':>6} {'err':>8} {'same':>5} {'wall s':>6}")
    for r in res["chain"] + res["engine"]:
        if "gpu_ms" in r:
            same = r.get("same_as_plain", r.get("same_tokens"))
            case = r["case"] if r["case"].startswith("engine") else "chain " + r["case"]
            print(f"{r['size']:>5} {case:<22} {r['gpu_ms']:>8.4f} {r.get('TB_s', ''):>6} "
                  f"{r.get('layer0_rel_err', ''):>8} {str(same):>5} {r['wall_s']:>6}")
        else:
            print(f"{r.get('size', ''):>5} {r.get('case', ''):<22} {r.get('error', r.get('skipped', ''))[:90]}")
    print("wall", res["wall_s"], "s")


if __name__ == "__main__":
    main()
