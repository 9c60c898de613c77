"""Probe (issues 19, 17): where a batched decode step's time goes, by kind, against batch 1.

At batch 32 a Qwen3-4B step takes ~4.2 ms against ~2.6 at batch 1, while the step's GEMMs alone
stream the weights at ~2.9 TB/s (benchmarks/probes/skinny_probe.py: ~2.5 ms of the 36 layers'
four projections). One random 4B engine (bf16, every row at cache length CONTEXT in its own
slot); per batch B of argv[2] (default 1,8,32): the engine's greedy step (PDL graph) timed on the
GPU (batch_decode_probe.step_case), then its per-kernel profile (decode_profile.profile_step:
captured without PDL, each kernel's own time and the gaps between kernels). Printed last: per
kind (the weight kernels "gemv", the LM head, attention, the small kernels, the sampler, the
gaps) the own time at each B and its growth over B = 1, then each B's per-layer kernels.
    PYTHONPATH=src python3 benchmarks/probes/batch_step_kinds.py "$OUT/steps.json" 1,8,32
Every case catches its own errors (batch_decode_probe.guarded); BATCH_BUDGET_S bounds the run.
"""
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # batch_decode_probe, beside this file

import batch_decode_probe as bdp  # noqa: E402

from tilesafe.engine import LLM  # noqa: E402

KINDS = ("gemv", "lm_head", "attention", "small", "sampler")


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "1,8,32").split(",") if b]
    size = os.environ.get("BATCH_SIZE_NAME", "4b")
    res = {"device": torch.cuda.get_device_name(), "size": size, "context": bdp.CONTEXT, "steps": [],
           "profiles": []}
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=bdp.MAX_LEN,
                          max_num_seqs=max(batches), progress=False)
    res["build_s"] = round(time.perf_counter() - bdp.T0, 1)
    print(f"built {size} in {res['build_s']} s", flush=True)
    with torch.inference_mode():
        for n in range(llm.config.num_layers):      # finite keys and values where the rows read them
            llm.model.cache.k[n][:, :bdp.CONTEXT].normal_()
            llm.model.cache.v[n][:, :bdp.CONTEXT].normal_()
        for b in batches:
            r = bdp.guarded(res["steps"], f"step B={b}", lambda b=b: bdp.step_case(llm, b))
            if r and "gpu_ms" in r:
                bdp.guarded(res["profiles"], f"profile B={b}",
                            lambda b=b, ms=r["gpu_ms"]: {"batch": b, "profile": bdp.profile_case(llm, b, ms)})
    res["wall_s"] = round(time.perf_counter() - bdp.T0, 1)
    if out_path:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(res, indent=1, default=str))
    table(res)


def kinds_at(res: dict) -> dict:
    """{B: {kind: own us (plain), "gaps": us, "span": us, "pdl span": us, "step": us}}."""
    steps = {r["batch"]: r["gpu_ms"] for r in res["steps"] if "gpu_ms" in r}
    out = {}
    for p in res["profiles"]:
        prof = p.get("profile") or {}
        plain, s = prof.get("plain") or {}, prof.get("summary") or {}
        if not plain:
            continue
        row = {k: (plain.get("by_kind") or {}).get(k, {}).get("own_us", 0.0) for k in KINDS}
        row.update(gaps=s.get("plain_gap_us"), span=plain.get("span_us"), **{"pdl span": s.get("pdl_span_us")})
        row["step"] = round(steps[p["batch"]] * 1e3, 1) if p["batch"] in steps else None
        out[p["batch"]] = row
    return out


def table(res: dict) -> None:
    print(f"\n{res['size']} context {res['context']}, build {res.get('build_s')} s, wall {res.get('wall_s')} s")
    for r in res["steps"]:
        if "gpu_ms" in r:
            print(f"B={r['batch']:<3} step {r['gpu_ms']} ms, {r['tok_s']} tok/s, roofline {r['roofline']}")
        else:
            print(r.get("case"), r.get("error", r.get("skipped")))
    at = kinds_at(res)
    if not at:
        print("no profile came back")
        return
    bs = sorted(at)
    names = [*KINDS, "gaps", "span", "pdl span", "step"]
    print(f"\nown us per kind (captured without PDL){'':14}" + "".join(f"{'B=' + str(b):>10}" for b in bs) +
          "".join(f"{'+' + str(b) + ' vs ' + str(bs[0]):>14}" for b in bs[1:]))
    for k in names:
        vals = [at[b].get(k) for b in bs]
        cells = "".join(f"{v if v is not None else '-':>10}" for v in vals)
        grow = "".join(f"{round(v - vals[0], 1) if v is not None and vals[0] is not None else '-':>14}"
                       for v in vals[1:])
        print(f"{k:<52}{cells}{grow}")
    for p in res["profiles"]:
        plain = (p.get("profile") or {}).get("plain") or {}
        print(f"\nB={p.get('batch')} one layer (median over layers, without PDL): kernel, us, own us, gap us, GB/s")
        for r in plain.get("per_position") or []:
            print(f"   {r['kernel']:<32} {r['us']:>8} {r['own_us']:>8} {r['gap_us']:>7} {r.get('GB_s') or '':>8}")


if __name__ == "__main__":
    main()
