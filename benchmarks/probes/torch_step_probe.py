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
Each part catches its own exception; a short table at the end.

    PYTHONPATH=src python3 benchmarks/probes/torch_step_probe.py --out torch_step.json   # ~30 s on an H200
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
from torch_qwen3 import LeanTorchQwen3Step, TorchQwen3Step          # noqa: E402


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


def part(out: dict, name: str, fn) -> None:
    t0 = time.perf_counter()
    try:
        out[name] = fn()
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"[:600]}
        traceback.print_exc()
    print(f"[{name}] {time.perf_counter() - t0:.1f} s: {json.dumps(out[name], default=str)[:400]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4b")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256, help="engine.py's --tokens: sets the cache length")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (--size tiny; no timings)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    max_len = 128 + args.tokens + engine.CHECK_PROMPT + engine.CHECK_TOKENS + 8     # engine.py's short engine
    out = {"gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "torch": torch.__version__, "size": args.size,
           "context": args.context, "max_len": max_len}
    t0 = time.perf_counter()
    llm = engine.build(args.size, max_len, 1, args.device)
    out["build_s"] = time.perf_counter() - t0
    plain, lean = TorchQwen3Step(llm, max_len), LeanTorchQwen3Step(llm, max_len)
    part(out, "check", lambda: check(plain, lean))
    part(out, "sdpa_plain", lambda: sdpa_backends(plain, False))
    part(out, "sdpa_lean", lambda: sdpa_backends(lean, True))
    part(out, "kernels_plain", lambda: kernels(plain))
    part(out, "kernels_lean", lambda: kernels(lean))
    part(out, "plain_s", lambda: plain.step_seconds(args.context))
    part(out, "lean_s", lambda: lean.step_seconds(args.context))

    def lean_only(backend: str) -> float:
        """The lean step captured with SDPA held to one backend (which is fastest, if it is not the default)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        step = LeanTorchQwen3Step(llm, max_len)
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            step.capture()
        return step.step_seconds(args.context)
    for backend in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        part(out, f"lean_{backend.lower()}_s", lambda backend=backend: lean_only(backend))

    def engine_step() -> dict:
        llm.generate([engine.prompt_ids(128, 0)], engine.greedy(8))     # captures the batch-1 decode graph
        return engine.replayed_step(llm, args.context)
    part(out, "engine_step", engine_step)
    part(out, "plain_again_s", lambda: plain.step_seconds(args.context))   # drift check: same number twice
    out["wall_s"] = time.perf_counter() - t0

    def ms(v):
        return f"{v * 1e3:8.3f}" if isinstance(v, float) else "   error"
    eng = out["engine_step"] if isinstance(out["engine_step"], dict) else {}
    rows = [("torch plain (graph)", out["plain_s"]), ("torch plain again", out["plain_again_s"]),
            ("torch lean (graph)", out["lean_s"]),
            *[(f"  lean, sdpa={b.split('_')[0]}", out[f"lean_{b}_s"])
              for b in ("efficient_attention", "cudnn_attention", "math")],
            ("engine back-to-back", eng.get("back_to_back_s")),
            ("engine gpu-only", eng.get("gpu_s")), ("issue calibration", 3.54e-3)]
    print(f"\n{args.size} decode step at context {args.context} (cache {max_len} rows), {out['gpu']}")
    print(f"{'step':22} {'ms':>8} {'tok/s':>8}")
    for name, v in rows:
        print(f"{name:22} {ms(v)} {1 / v if isinstance(v, float) else float('nan'):8.1f}")
    c = out["check"]
    print(f"lean vs plain logits: {c}")
    for k in ("kernels_plain", "kernels_lean"):
        v = out[k]
        print(f"{k}: {v.get('total')} kernels, {v.get('per_layer')} per layer" if "total" in v else f"{k}: {v}")
    print(f"sdpa plain: {out['sdpa_plain']}\nsdpa lean: {out['sdpa_lean']}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
