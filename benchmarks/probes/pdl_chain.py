"""Probe: what programmatic dependent launch saves between captured kernels (issue 17 item 3).

1. A chain of 300 small dependent kernels (each reads the previous one's output), captured
   with `ts.graph(pdl=False)` and `ts.graph(pdl=True)`: GPU time per replay, measured with
   the replays queued behind a GPU sleep (the host's enqueue hidden), and per kernel.
2. The engine's batch-1 decode graph (random weights, real Qwen3 shapes) captured without
   and with PDL: GPU time per step the same way, back-to-back time, and the tokens of both
   (they must agree).
JSON to argv[1]; argv[2] the engine sizes (default "0.6b,4b"; "" for the chain only). Sizes
after the first are skipped once `BUDGET_S` seconds have passed (compiling both variants of
the engine's kernels takes most of the time on a fresh cache).
    PYTHONPATH=src python3 benchmarks/probes/pdl_chain.py "$OUT/pdl.json" 0.6b,4b
"""
import json
import sys
import time

import torch

import tilesafe as ts

CHAIN = 300
BUDGET_S = 50.0              # start no further engine size after this long
T0 = time.perf_counter()


@ts.kernel
def axpb(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, a: float, b: float):
    z.store(ts.load_tile_like(x, z) * a + b)


def gpu_ms(replay, n=20) -> tuple[float, float]:
    """(ms per replay behind a GPU sleep, ms per replay back to back)."""
    for _ in range(3):
        replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(300_000_000)           # the host queues the replays while the GPU sleeps
    s.record()
    for _ in range(n):
        replay()
    e.record()
    torch.cuda.synchronize()
    behind = s.elapsed_time(e) / n
    s.record()
    for _ in range(n):
        replay()
    e.record()
    torch.cuda.synchronize()
    return behind, s.elapsed_time(e) / n


def chain(n: int, block: int) -> dict:
    out = {"kernels": CHAIN, "elements": n, "blocks": -(-n // block)}
    x, y = ts.randn(n, seed=0, device="cuda"), ts.zeros(n, device="cuda")

    def run():
        for i in range(CHAIN // 2):
            axpb(y.partition((block,)), x, a=0.5, b=1.0)
            axpb(x.partition((block,)), y, a=2.0, b=-2.0)       # x -> x: the chain is a fixed point
    for pdl in (False, True):
        with ts.pdl(pdl):
            run()                                              # compile outside the capture
        torch.cuda.synchronize()
        with ts.graph(pdl=pdl) as g:
            run()
        behind, b2b = gpu_ms(g.replay)
        key = "pdl" if pdl else "plain"
        out[key] = {"gpu_ms": round(behind, 4), "back_to_back_ms": round(b2b, 4),
                    "us_per_kernel": round(behind * 1000 / CHAIN, 3)}
    out["saved_us_per_kernel"] = round(out["plain"]["us_per_kernel"] - out["pdl"]["us_per_kernel"], 3)
    return out


def engine(size: str) -> dict:
    from tilesafe.engine import LLM, SamplingParams
    llm = LLM.from_random(size, device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=1, progress=False)
    prompt = [{"prompt_token_ids": [1, 2, 3, 4] * 8}]
    params = SamplingParams(max_tokens=8, temperature=0.0)
    out = {"size": size}
    steps = llm.decode_steps
    tokens = {}
    for pdl in (False, True):
        steps.pdl, steps.steps = pdl, {}
        t = time.perf_counter()
        tokens[pdl] = llm.generate(prompt, params)[0].outputs[0].token_ids
        step = steps.steps[1]
        graphs = getattr(step, "graphs", None)
        g = next(iter(graphs.values())) if isinstance(graphs, dict) and graphs else getattr(step, "graph", None)
        key = "pdl" if pdl else "plain"
        if g is None:
            out[key] = {"graph": False}
            continue
        behind, b2b = gpu_ms(g.replay)
        out[key] = {"graph_pdl": g.pdl, "gpu_ms": round(behind, 4), "back_to_back_ms": round(b2b, 4),
                    "first_generate_s": round(time.perf_counter() - t, 1)}
    out["same_tokens"] = tokens[False] == tokens[True]
    if "gpu_ms" in out["plain"] and "gpu_ms" in out["pdl"]:
        out["saved_us_per_step"] = round((out["plain"]["gpu_ms"] - out["pdl"]["gpu_ms"]) * 1000, 1)
    del llm
    torch.cuda.empty_cache()
    return out


def main():
    res = {"device": torch.cuda.get_device_name(), "chain": [chain(4096, 1024), chain(1 << 18, 1024)], "engine": []}
    for r in res["chain"]:
        print("chain", r)
    sizes = [s for s in (sys.argv[2] if len(sys.argv) > 2 else "0.6b,4b").split(",") if s]
    for i, size in enumerate(sizes):
        if i and time.perf_counter() - T0 > BUDGET_S:
            res["engine"].append({"size": size, "skipped": f"over the {BUDGET_S:.0f} s budget"})
            continue
        res["engine"].append(engine(size))
        print("engine", res["engine"][-1])
    res["wall_s"] = round(time.perf_counter() - T0, 1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)
    print("wall", res["wall_s"], "s")


if __name__ == "__main__":
    main()
