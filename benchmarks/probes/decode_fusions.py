"""Probe: what do the fused decode GEMVs save over the unfused sequence, per layer and at the
LM head? (`tilesafe.kernels.linear_fusions` / `linear_argmax`.)

For the Qwen3 0.6B, 4B and 8B layer shapes (bf16), M = 1 and 8 rows, the layer without its
attention kernels — unfused: add+RMSNorm, QKV, o, add+RMSNorm, gate/up, SiLU-mul, down (7
launches, as `Qwen3Model._forward`); fused: rms_norm_linear, linear(residual=, out=residual),
rms_norm_linear, silu_mul_linear(residual=, out=residual) (4 launches, `_forward_fused`) —
and the greedy LM head: final RMSNorm, LM head GEMV, `sample` at temperature 0, against
`linear_argmax(norm_weight=)`. Beside each, the fused form with the norms as their own kernels
("epilogues_only", "norm_then_argmax"): whether the norm prologue pays at that shape
(engine/model.py's NORM_PROLOGUE picks the form), and with SiLU-mul apart too ("silu_apart": only
the residual adds fused, SILU_PROLOGUE = False). Each sequence is timed (CUDA events, median of 7) as one
`ts.graph()` of many layers, rotating through enough layers' weights (>= 3x the 60 MB L2)
that every GEMV streams from HBM, and eagerly (host included). Before timing, the fused and
unfused results are compared (bf16: close, and the greedy ids equal). GB/s counts the weight
bytes streamed. JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/decode_fusions.py "$OUT/decode_fusions.json" [4b[,0.6b,8b]]
"""
import json
import statistics
import sys
import time

import torch

import tilesafe as ts
import tilesafe.kernels as tk

SHAPES = {   # hidden, heads, kv heads, head_dim, intermediate, vocabulary
    "0.6b": (1024, 16, 8, 128, 3072, 151936),
    "4b": (2560, 32, 8, 128, 9728, 151936),
    "8b": (4096, 32, 8, 128, 12288, 151936),
}
ROTATE_BYTES = 200e6           # weights a graph rotates through: > 3x the H200's L2
PER_GRAPH = 36                 # layers captured in one graph
EPS = 1e-6
DT = torch.bfloat16
DEVICE = "cuda"


def median_ms(fn, reps=7) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def weights(e, h, kv, d, i, n):
    g = torch.Generator(device=DEVICE).manual_seed(0)

    def w(*shape, scale=0.02):
        return (scale * torch.randn(shape, generator=g, device=DEVICE)).to(DT)
    return [dict(qkv=w((h + 2 * kv) * d, e), o=w(e, h * d), gu=w(2 * i, e), down=w(e, i),
                 g1=(1 + w(e, scale=0.1)), g2=(1 + w(e, scale=0.1))) for _ in range(n)]


def buffers(m, e, h, kv, d, i):
    def b(*shape):
        return torch.randn(shape, device=DEVICE).to(DT)
    return dict(res=b(m, e), h=b(m, e), x=b(m, e), qkv=b(m, (h + 2 * kv) * d), attn=b(m, h * d), gu=b(m, 2 * i),
                act=b(m, i))


def unfused_layer(b, w):
    tk.rms_norm(b["h"], w["g1"], EPS, residual=b["res"], out=b["x"], residual_out=b["res"])
    tk.linear(b["x"], w["qkv"], out=b["qkv"])
    tk.linear(b["attn"], w["o"], out=b["h"])
    tk.rms_norm(b["h"], w["g2"], EPS, residual=b["res"], out=b["x"], residual_out=b["res"])
    tk.linear(b["x"], w["gu"], out=b["gu"])
    i = b["act"].shape[1]
    tk.silu_mul(b["gu"][:, :i], b["gu"][:, i:], out=b["act"])
    tk.linear(b["act"], w["down"], out=b["h"])


def fused_layer(b, w):
    tk.rms_norm_linear(b["res"], w["g1"], w["qkv"], EPS, out=b["qkv"])
    tk.linear(b["attn"], w["o"], residual=b["res"], out=b["res"])
    tk.rms_norm_linear(b["res"], w["g2"], w["gu"], EPS, out=b["gu"])
    tk.silu_mul_linear(b["gu"], w["down"], residual=b["res"], out=b["res"])


def epilogues_only_layer(b, w):
    """The residual epilogues and the SiLU-mul prologue, but each norm its own kernel: does the
    norm prologue (every GEMV block recomputing the row's statistics) pay?"""
    tk.rms_norm(b["res"], w["g1"], EPS, out=b["x"])
    tk.linear(b["x"], w["qkv"], out=b["qkv"])
    tk.linear(b["attn"], w["o"], residual=b["res"], out=b["res"])
    tk.rms_norm(b["res"], w["g2"], EPS, out=b["x"])
    tk.linear(b["x"], w["gu"], out=b["gu"])
    tk.silu_mul_linear(b["gu"], w["down"], residual=b["res"], out=b["res"])


def silu_apart_layer(b, w):
    """`epilogues_only_layer` with SiLU-mul its own kernel too: only the residual adds fused
    (engine/model.py's SILU_PROLOGUE = False). Does the SiLU prologue, which every block of
    the down GEMV recomputes over the whole row, pay?"""
    tk.rms_norm(b["res"], w["g1"], EPS, out=b["x"])
    tk.linear(b["x"], w["qkv"], out=b["qkv"])
    tk.linear(b["attn"], w["o"], residual=b["res"], out=b["res"])
    tk.rms_norm(b["res"], w["g2"], EPS, out=b["x"])
    tk.linear(b["x"], w["gu"], out=b["gu"])
    i = b["act"].shape[1]
    tk.silu_mul(b["gu"][:, :i], b["gu"][:, i:], out=b["act"])
    tk.linear(b["act"], w["down"], residual=b["res"], out=b["res"])


def time_layers(layer, b, ws) -> dict:
    seq = [ws[j % len(ws)] for j in range(PER_GRAPH)]

    def run():
        for w in seq:
            layer(b, w)
    run()                                               # compiles, makes the split-K scratch
    with ts.graph() as g:
        run()
    graph_ms = median_ms(g.replay)
    eager_ms = median_ms(run, reps=3)
    return {"graph_us_per_layer": graph_ms * 1e3 / PER_GRAPH, "eager_us_per_layer": eager_ms * 1e3 / PER_GRAPH}


def check_layer(m, e, h, kv, d, i, w) -> float:
    """max |fused - unfused| / max |unfused| of the residual after one layer (bf16 rounding apart)."""
    a = buffers(m, e, h, kv, d, i)
    b = {k: v.clone() for k, v in a.items()}
    # unfused: the residual add of h happens at the next norm; fold h in first so both start equal
    b["h"].zero_()
    a["h"].zero_()
    a["res"].copy_(b["res"])
    unfused_layer(b, w)
    tk.residual_add(b["h"], b["res"], out=b["res"])     # the down projection's add, done by the next norm
    fused_layer(a, w)
    return float((a["res"].float() - b["res"].float()).abs().max() / b["res"].float().abs().max())


def head(m, e, v):
    g = torch.Generator(device=DEVICE).manual_seed(1)
    lm = (0.02 * torch.randn(v, e, generator=g, device=DEVICE)).to(DT)
    gn = (1 + 0.1 * torch.randn(e, generator=g, device=DEVICE)).to(DT)
    res = torch.randn(m, e, generator=g, device=DEVICE).to(DT)
    x, logits = torch.empty(m, e, device=DEVICE, dtype=DT), torch.empty(m, v, device=DEVICE, dtype=DT)
    temp, top_k, top_p = torch.zeros(m, device=DEVICE), torch.zeros(m, dtype=torch.int32, device=DEVICE), \
        torch.ones(m, device=DEVICE)
    seed, step = torch.zeros(m, dtype=torch.int64, device=DEVICE), torch.zeros(m, dtype=torch.int32, device=DEVICE)
    ids_u, lp_u = torch.empty(m, dtype=torch.int32, device=DEVICE), torch.empty(m, device=DEVICE)
    ids_f, lp_f = torch.empty(m, dtype=torch.int32, device=DEVICE), torch.empty(m, device=DEVICE)

    def unfused():
        tk.rms_norm(res, gn, EPS, out=x)
        tk.linear(x, lm, out=logits)
        tk.sample(logits, temp, top_k, top_p, seed, step, out=ids_u, logprobs_out=lp_u)

    def fused():
        tk.linear_argmax(res, lm, norm_weight=gn, eps=EPS, out=ids_f, logprobs_out=lp_f)

    def norm_then_argmax():                   # the norm as its own kernel: does its prologue pay here?
        tk.rms_norm(res, gn, EPS, out=x)
        tk.linear_argmax(x, lm, out=ids_f, logprobs_out=lp_f)
    unfused(), fused()
    torch.cuda.synchronize()
    out = {"ids_equal": bool(torch.equal(ids_u, ids_f)), "logprob_max_diff": float((lp_u - lp_f).abs().max()),
           "weight_gb": v * e * 2 / 1e9}
    for name, fn in (("unfused", unfused), ("fused", fused), ("norm_then_argmax", norm_then_argmax)):
        fn()
        with ts.graph() as gr:
            fn()
        out[name] = {"graph_us": median_ms(gr.replay) * 1e3, "eager_us": median_ms(fn, reps=5) * 1e3}
    out["saved_us"] = out["unfused"]["graph_us"] - out["fused"]["graph_us"]
    return out


def probe(size: str, m: int) -> dict:
    e, h, kv, d, i, v = SHAPES[size]
    layer_bytes = 2 * ((h + 2 * kv) * d * e + e * h * d + 2 * i * e + e * i)
    ws = weights(e, h, kv, d, i, max(2, -int(-ROTATE_BYTES // layer_bytes)))
    out = {"size": size, "m": m, "layer_weight_mb": layer_bytes / 1e6, "layers_rotated": len(ws),
           "fused_vs_unfused_rel_diff": check_layer(m, e, h, kv, d, i, ws[0])}
    for name, layer in (("unfused", unfused_layer), ("fused", fused_layer), ("epilogues_only", epilogues_only_layer),
                        ("silu_apart", silu_apart_layer)):
        t = time_layers(layer, buffers(m, e, h, kv, d, i), ws)
        t["weight_gb_per_s"] = layer_bytes / (t["graph_us_per_layer"] * 1e-6) / 1e9
        out[name] = t
    out["saved_us_per_layer"] = out["unfused"]["graph_us_per_layer"] - out["fused"]["graph_us_per_layer"]
    del ws
    out["lm_head"] = head(m, e, v)
    torch.cuda.empty_cache()
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "decode_fusions.json"
    sizes = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SHAPES)
    results = []
    with torch.inference_mode():
        for size in sizes:
            for m in (1, 8):
                t0 = time.perf_counter()
                r = probe(size, m)
                r["probe_s"] = time.perf_counter() - t0          # compiles included
                results.append(r)
                hd = r["lm_head"]
                print(f"{size:>5} M={m}: layer {r['unfused']['graph_us_per_layer']:7.1f} -> "
                      f"{r['fused']['graph_us_per_layer']:7.1f} us (graph; {r['fused']['weight_gb_per_s']:6.0f} GB/s "
                      f"fused), eager {r['unfused']['eager_us_per_layer']:6.1f} -> "
                      f"{r['fused']['eager_us_per_layer']:6.1f} us (norms apart: "
                      f"{r['epilogues_only']['graph_us_per_layer']:7.1f}, silu apart too: "
                      f"{r['silu_apart']['graph_us_per_layer']:7.1f}); "
                      f"rel diff {r['fused_vs_unfused_rel_diff']:.1e} | "
                      f"LM head {hd['unfused']['graph_us']:6.1f} -> {hd['fused']['graph_us']:6.1f} us "
                      f"(norm apart {hd['norm_then_argmax']['graph_us']:6.1f}), "
                      f"ids equal {hd['ids_equal']}, logprob diff {hd['logprob_max_diff']:.1e} "
                      f"[{r['probe_s']:.0f} s]", flush=True)
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
