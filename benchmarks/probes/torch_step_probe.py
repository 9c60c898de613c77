"""Probe: is the plain-PyTorch baseline's decode step as fast as a good PyTorch user's?

Issue 17 calibrates the baseline at 3.54 ms for a Qwen3-4B-shaped step under a CUDA graph on the
H200; `TorchQwen3Step` (the engine benchmark's baseline) ran 5.27 ms. `LeanTorchQwen3Step` is the
same math in fewer kernels (see its docstring). On one random-weight LLM built on the GPU as
`benchmarks/engine.py` builds it (its short engine's cache length), this probe
1. checks the lean step's logits against the plain step's, teacher-forced over the same tokens
   (bf16: max |diff| over the row's max |logit| within engine_check.REL_LIMIT);
2. says which SDPA backends accept each step's attention call (which one the step gets);
3. counts each step's CUDA kernels (one eager step under the profiler);
4. times the two steps' graph replays (`step_seconds`; the lean one also captured with SDPA held
   to each fused backend and to math) and the engine's replayed batch-1 step
   (`engine.replayed_step`) at one context (default 256), side by side in this run.
5. `lean_profile`: the lean step's per-kernel GPU time, grouped (GEMMs, SDPA, norms, RoPE/elementwise,
   cache writes, memsets, the rest; µs and count per step), over graph replays and over an eager step;
6. `cublas_floor`: the step's 4 x layers + 1 GEMVs alone in one CUDA graph (F.linear, and torch.mv):
   the time any cuBLAS step needs before its first norm;
7. `compiled`, `compiled_mm`, `compiled_glue(_mv)`: `CompiledTorchQwen3Step` (each layer's glue
   fused by torch.compile, GEMMs still cuBLAS), its variant with attention as bmm + softmax instead
   of SDPA, and its glue-only variants: compile seconds, Dynamo graphs, logits against the plain
   step's, the captured graph's replay time and its grouped profile.
Each part catches its own exception; a short table at the end. --parts picks parts (`new`: the
parts of 5-7 beside the plain and lean times).

    PYTHONPATH=src python3 benchmarks/probes/torch_step_probe.py --out torch_step.json   # ~2 min on an H200
    PYTHONPATH=src python3 benchmarks/probes/torch_step_probe.py --parts new --out torch3.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # benchmarks/

import engine                                                       # noqa: E402
import engine_check                                                 # noqa: E402
from torch_qwen3 import (CompiledGlueMvTorchQwen3Step, CompiledGlueTorchQwen3Step,  # noqa: E402
                         CompiledMmTorchQwen3Step, CompiledTorchQwen3Step, LeanTorchQwen3Step, TorchQwen3Step)


def check(plain, lean) -> dict:
    seq = engine.prompt_ids(24, 5)["prompt_token_ids"]
    ref, got = plain.teacher_forced_logits(seq), lean.teacher_forced_logits(seq)
    err = engine_check.logit_error(got, ref)
    top1 = int((got.argmax(-1) == ref.argmax(-1)).sum())
    return {"positions": len(seq), "max_abs": err["max_abs"], "max_rel": err["max_rel"], "top1_agree": top1,
            "passed": err["max_rel"] <= engine_check.REL_LIMIT}


def sdpa_backends(step, lean: bool) -> dict:
    """Which SDPA backends take the step's attention call at layer 0's shapes ('ok' or why not)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cfg = step.cfg
    h, kv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    dev, dt = step.k[0].device, step.k[0].dtype
    if lean:
        q, kw = torch.randn(kv, 1, h // kv, d, device=dev, dtype=dt), {"attn_mask": step.mask}
        k = v = step.k[0].view(kv, 1, step.max_len, d)
    else:
        mask = (torch.arange(step.max_len, device=dev) <= 10).view(1, 1, 1, -1)
        q, kw = torch.randn(1, h, 1, d, device=dev, dtype=dt), {"attn_mask": mask, "enable_gqa": True}
        k = v = step.k[0]
    out = {}
    for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
              SDPBackend.MATH):
        try:
            with sdpa_kernel([b]), torch.inference_mode():
                F.scaled_dot_product_attention(q, k, v, **kw)
            torch.cuda.synchronize()
            out[b.name] = "ok"
        except Exception as e:
            out[b.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return out


def kernels(step) -> dict:
    """The CUDA kernels one eager step launches: how many, and the most frequent names."""
    from torch.profiler import ProfilerActivity, profile
    with torch.inference_mode():
        step._step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step._step()
            torch.cuda.synchronize()
    names = Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    per_layer = sum(names.values()) / step.cfg.num_layers
    return {"total": sum(names.values()), "per_layer": per_layer,
            "top": [[n[:90], c] for n, c in names.most_common(12)]}


GROUPS = (("sdpa", ("sdpa", "fmha", "flash", "attention", "cudnn")),     # first: fmha_cutlass... is SDPA's
          ("gemm", ("nvjet", "gemm", "gemv", "splitkreduce", "cublas", "cutlass")),
          ("triton (compiled glue)", ("triton_",)), ("norm", ("layer_norm", "rms")),
          ("cache write", ("index_copy", "index_put", "scatter")), ("memset", ("memset",)),
          ("rope/elementwise", ("roll", "addcmul", "elementwise", "functor", "copy", "where", "index")))


def group_of(name: str) -> str:
    low = name.lower()
    return next((g for g, keys in GROUPS if any(k in low for k in keys)), "rest")


def profile_step(step, context: int = 256, replays: int = 5) -> dict:
    """Per-kernel GPU time of the step, grouped (µs per step and kernels per step): once over
    `replays` graph replays (what the timed step runs; the gap to its wall time is launch gaps)
    and once over one eager step (the same kernels, if the profiler shows none inside graphs)."""
    from torch.profiler import ProfilerActivity, profile

    def grouped(run, per: int) -> dict:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        groups, names = {}, {}
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = e.time_range.elapsed_us()
            g = groups.setdefault(group_of(e.name), [0.0, 0])
            g[0], g[1] = g[0] + us, g[1] + 1
            n = names.setdefault(e.name[:80], [0.0, 0])
            n[0], n[1] = n[0] + us, n[1] + 1
        total = sum(v[0] for v in groups.values())
        return {"kernel_us_per_step": total / per, "kernels_per_step": sum(v[1] for v in groups.values()) / per,
                "groups": {g: {"us": round(v[0] / per, 1), "count": v[1] / per}
                           for g, v in sorted(groups.items(), key=lambda kv: -kv[1][0])},
                "top": [[n, round(v[0] / per, 1), v[1] / per] for n, v in
                        sorted(names.items(), key=lambda kv: -kv[1][0])[:14]]}
    if step.graph is None:
        step.capture()
    step.pos.fill_(context - 1)
    out = {}
    try:
        out["graph"] = grouped(lambda: [step.graph.replay() for _ in range(replays)], replays)
    except Exception as e:
        out["graph"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    with torch.inference_mode():
        step._step()
        out["eager"] = grouped(step._step, 1)
    return out


def cublas_floor(step, reps: int = 50) -> dict:
    """The step's 4 x layers + 1 GEMVs alone (its weights, batch 1), captured in one CUDA graph:
    the floor any cuBLAS step has. `linear`: F.linear(x, W) as the steps call it; `mv`: torch.mv(W, x)
    (cuBLAS's other orientation, in case it picks a faster kernel for one row)."""
    w = step.w
    mats = [m for layer in w.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [w.lm_head]
    xs = [torch.randn(1, m.shape[1], device=m.device, dtype=m.dtype) for m in mats]
    out = {"gemms": len(mats), "weight_gb": sum(m.numel() * m.element_size() for m in mats) / 1e9}
    blas, reduced = torch.backends.cuda.preferred_blas_library(), \
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    out["default_blas"] = str(blas)
    for name, call, lib, red in (("linear", lambda m, x: F.linear(x, m), blas, reduced),
                                 ("mv", lambda m, x: torch.mv(m, x[0]), blas, reduced),
                                 ("linear_cublaslt", lambda m, x: F.linear(x, m), "cublaslt", reduced),
                                 ("linear_cublas", lambda m, x: F.linear(x, m), "cublas", reduced),
                                 ("linear_no_reduced_bf16", lambda m, x: F.linear(x, m), blas, not reduced)):
        try:
            torch.backends.cuda.preferred_blas_library(lib)      # read when the graph is captured
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = red
            out[f"{name}_s"] = floor_graph(mats, xs, call, reps)
            out[f"{name}_tb_per_s"] = out["weight_gb"] / out[f"{name}_s"] / 1e3
        except Exception as e:
            out[f"{name}_s"] = f"{type(e).__name__}: {e}"[:200]
        finally:
            torch.backends.cuda.preferred_blas_library(blas)
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
    return out


def floor_graph(mats, xs, call, reps: int) -> float:
    """Seconds of one replay of a CUDA graph of call(m, x) over the GEMVs, one after another."""
    def run():
        for m, x in zip(mats, xs):
            call(m, x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.inference_mode():
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.inference_mode():
        run()
    for _ in range(3):
        g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def blas_variants(step, context: int) -> dict:
    """The step's graph captured again under each cuBLAS setting (the library and bf16 reduced-precision
    split-K reductions are read when a GEMM is launched, so when the graph is captured): seconds each."""
    lib, reduced = torch.backends.cuda.preferred_blas_library(), \
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    out = {}
    for name, want_lib, want_red in (("cublaslt", "cublaslt", reduced), ("cublas", "cublas", reduced),
                                     ("no_reduced_bf16", lib, not reduced)):
        try:
            torch.backends.cuda.preferred_blas_library(want_lib)
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = want_red
            step.graph = None
            step.capture()
            out[name] = step.step_seconds(context)
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"[:200]
        finally:
            torch.backends.cuda.preferred_blas_library(lib)
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
    step.graph = None                             # the next timing captures under the defaults again
    return out


def compiled(plain, cls, llm, max_len: int, context: int) -> dict:
    """A compiled step: its logits against the plain step's (teacher-forced, bf16 limit; the first
    eager step compiles: compile_s, graphs), then its captured graph's replay time."""
    step, r = cls(llm, max_len), {}
    for key, fn in (("check", lambda: check(plain, step)), ("step_s", lambda: step.step_seconds(context)),
                    ("profile", lambda: profile_step(step, context))):
        t0 = time.perf_counter()
        try:                                       # what one sub-part found survives another's error
            r[key] = fn()
        except Exception as e:
            r[key] = {"error": f"{type(e).__name__}: {e}"[:600]}
            traceback.print_exc()
        r[f"{key}_wall_s"] = time.perf_counter() - t0
        if key == "check":
            r["compile_s"], r["graphs"] = step.compile_s, step.graphs
    return r


def part(out: dict, name: str, fn) -> None:
    t0 = time.perf_counter()
    try:
        out[name] = fn()
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"[:600]}
        traceback.print_exc()
    print(f"[{name}] {time.perf_counter() - t0:.1f} s: {json.dumps(out[name], default=str)[:400]}", flush=True)


PARTS = ("check", "sdpa_plain", "sdpa_lean", "kernels_plain", "kernels_lean", "plain_s", "lean_s",
         "lean_efficient_attention_s", "lean_cudnn_attention_s", "lean_math_s", "engine_step", "lean_profile",
         "lean_blas", "cublas_floor", "compiled", "compiled_mm", "compiled_glue", "compiled_glue_mv",
         "plain_again_s")
NEW_PARTS = "plain_s,lean_s,lean_profile,lean_blas,cublas_floor,compiled,compiled_mm,compiled_glue,compiled_glue_mv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4b")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256, help="engine.py's --tokens: sets the cache length")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (--size tiny; no timings)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated parts to run, in that order (default all; 'new': {NEW_PARTS})")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    wanted = NEW_PARTS.split(",") if args.parts == "new" else args.parts.split(",")
    unknown = sorted(set(wanted) - set(PARTS))
    if unknown:
        ap.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    max_len = 128 + args.tokens + engine.CHECK_PROMPT + engine.CHECK_TOKENS + 8     # engine.py's short engine
    out = {"gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "torch": torch.__version__, "size": args.size,
           "context": args.context, "max_len": max_len}
    t0 = time.perf_counter()
    llm = engine.build(args.size, max_len, 1, args.device)
    out["build_s"] = time.perf_counter() - t0
    plain, lean = TorchQwen3Step(llm, max_len), LeanTorchQwen3Step(llm, max_len)

    def lean_only(backend: str) -> float:
        """The lean step captured with SDPA held to one backend (which is fastest, if it is not the default)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        step = LeanTorchQwen3Step(llm, max_len)
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            step.capture()
        return step.step_seconds(args.context)

    def engine_step() -> dict:
        llm.generate([engine.prompt_ids(128, 0)], engine.greedy(8))     # captures the batch-1 decode graph
        return engine.replayed_step(llm, args.context)
    fns = {"check": lambda: check(plain, lean),
           "sdpa_plain": lambda: sdpa_backends(plain, False), "sdpa_lean": lambda: sdpa_backends(lean, True),
           "kernels_plain": lambda: kernels(plain), "kernels_lean": lambda: kernels(lean),
           "plain_s": lambda: plain.step_seconds(args.context), "lean_s": lambda: lean.step_seconds(args.context),
           **{f"lean_{b.lower()}_s": (lambda b=b: lean_only(b))
              for b in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")},
           "engine_step": engine_step,
           "lean_profile": lambda: profile_step(lean, args.context),
           "lean_blas": lambda: blas_variants(lean, args.context),
           "cublas_floor": lambda: cublas_floor(lean),
           "compiled": lambda: compiled(plain, CompiledTorchQwen3Step, llm, max_len, args.context),
           "compiled_mm": lambda: compiled(plain, CompiledMmTorchQwen3Step, llm, max_len, args.context),
           "compiled_glue": lambda: compiled(plain, CompiledGlueTorchQwen3Step, llm, max_len, args.context),
           "compiled_glue_mv": lambda: compiled(plain, CompiledGlueMvTorchQwen3Step, llm, max_len, args.context),
           "plain_again_s": lambda: plain.step_seconds(args.context)}   # drift check: same number twice
    for name in wanted:                            # in the order asked for
        part(out, name, fns[name])
        if args.out:                               # what ran so far survives a timeout of a later part
            Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
    out["wall_s"] = time.perf_counter() - t0

    def ms(v):
        return f"{v * 1e3:8.3f}" if isinstance(v, float) else "       -"

    def get(*keys):
        v = out
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return v
    rows = [("torch plain (graph)", get("plain_s")), ("torch plain again", get("plain_again_s")),
            ("torch lean (graph)", get("lean_s")),
            *[(f"  lean, sdpa={b.split('_')[0]}", get(f"lean_{b}_s"))
              for b in ("efficient_attention", "cudnn_attention", "math")],
            ("torch compiled (graph)", get("compiled", "step_s")),
            ("  attention as bmm", get("compiled_mm", "step_s")),
            ("torch compiled glue", get("compiled_glue", "step_s")),
            ("  glue, GEMVs as mv", get("compiled_glue_mv", "step_s")),
            ("cuBLAS floor (linear)", get("cublas_floor", "linear_s")),
            ("cuBLAS floor (mv)", get("cublas_floor", "mv_s")),
            ("engine back-to-back", get("engine_step", "back_to_back_s")),
            ("engine gpu-only", get("engine_step", "gpu_s")), ("issue calibration", 3.54e-3)]
    print(f"\n{args.size} decode step at context {args.context} (cache {max_len} rows), {out['gpu']}")
    print(f"{'step':24} {'ms':>8} {'tok/s':>8}")
    for name, v in rows:
        print(f"{name:24} {ms(v)} {1 / v if isinstance(v, float) else float('nan'):8.1f}")
    for name in ("lean_blas", "cublas_floor"):
        if name in out:
            print(f"{name}: " + ", ".join(f"{k} {v * 1e3:.3f} ms" if isinstance(v, float) and "tb" not in k
                                          and k != "weight_gb" else f"{k} {v}" for k, v in out[name].items()))
    for name in ("compiled", "compiled_mm", "compiled_glue", "compiled_glue_mv"):
        if name in out:
            print(f"{name}: compile {get(name, 'compile_s')} s, {get(name, 'graphs')} graphs, "
                  f"check {get(name, 'check')}" if "error" not in out[name]
                  else f"{name}: {out[name]}")
    for name, prof in (("lean", get("lean_profile")), ("compiled", get("compiled", "profile")),
                       ("compiled_mm", get("compiled_mm", "profile")),
                       ("compiled_glue", get("compiled_glue", "profile")),
                       ("compiled_glue_mv", get("compiled_glue_mv", "profile"))):
        for how in ("graph", "eager"):
            p = (prof or {}).get(how)
            if isinstance(p, dict) and "groups" in p:
                print(f"{name} {how}: {p['kernel_us_per_step']:.0f} us of kernels, {p['kernels_per_step']:.0f} "
                      "kernels per step: " + ", ".join(f"{g} {v['us']:.0f} us/{v['count']:.0f}"
                                                        for g, v in p["groups"].items()))
    if "check" in out:
        print(f"lean vs plain logits: {out['check']}")
    for k in ("kernels_plain", "kernels_lean"):
        v = out.get(k)
        if v is not None:
            print(f"{k}: {v.get('total')} kernels, {v.get('per_layer')} per layer" if "total" in v else f"{k}: {v}")
    for k in ("sdpa_plain", "sdpa_lean"):
        if k in out:
            print(f"{k}: {out[k]}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
