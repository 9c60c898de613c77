"""CPU cost of serving's HTTP path per output token, device work stubbed out (CPU).

    PYTHONPATH=src python benchmarks/probes/serve_http_cost.py --clients 8,32,128 --step-ms 5 [--same-process]

A random tiny Qwen3 behind the real server (AsyncLLM, FastAPI, uvicorn on a thread) whose
model calls are replaced by a sleep of --step-ms (the GIL released, as while the engine
thread waits on the GPU) that writes plausible tokens. C streaming clients (serve_load's)
send greedy requests back to back, in a separate process unless --same-process (the load
generator sharing the server's GIL, as serve_load did before). Prints, per level, output
tokens/s against the stub's ceiling (C tokens per step), the server process's CPU µs per
token split by thread (engine, HTTP event loop) and the client's, and the SSE chunks per
token (below 1 when outputs were coalesced).
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # benchmarks/: serve_load's client


def stub_model(step_s: float):
    import torch
    from tilesafe.engine.model import Qwen3Model

    def decode(self, a, workspace, greedy=False):
        time.sleep(step_s)
        a.tokens.copy_(a.ids)

    def prefill_paged(self, a, starts, cached, tables, **kw):
        time.sleep(step_s)
        a.tokens.fill_(1234)
        a.chosen.zero_()
    Qwen3Model.decode, Qwen3Model.prefill_paged = decode, prefill_paged
    del torch


def _thread_cpu(t: threading.Thread) -> float:
    return time.clock_gettime(time.pthread_getcpuclockid(t.ident))


def _client(url, model, reqs, c, q):
    import serve_load
    t = time.process_time()
    res = asyncio.run(serve_load._level(url, model, reqs, c))
    q.put((res, time.process_time() - t))


def level(url, model, reqs, c, same_process: bool):
    import serve_load
    if same_process:
        return asyncio.run(serve_load._level(url, model, reqs, c)), None
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_client, args=(url, model, reqs, c, q))
    p.start()
    res, cpu = q.get()
    p.join()
    return res, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="8,32,128")
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--same-process", action="store_true")
    args = ap.parse_args(argv)
    stub_model(args.step_ms / 1e3)
    from tilesafe.engine import LLM
    from tilesafe.serve import AsyncLLM, BackgroundServer, ServerMetrics, build_app
    cs = [int(x) for x in args.clients.split(",")]
    llm = LLM.from_random("tiny", device="cpu", max_model_len=256, max_num_seqs=max(cs), progress=False)
    metrics = ServerMetrics("probe")
    engine = AsyncLLM(llm, metrics=metrics, warm_up=False)
    server = BackgroundServer(build_app(engine, "probe", metrics))
    rows = []
    try:
        for c in cs:
            reqs = [([100 + (i * 7 + j) % 900 for j in range(32)], args.output_len)
                    for i in range(c * args.requests_per_client)]
            level(server.url, "probe", reqs[:c], c, args.same_process)           # warm-up round
            e0, h0 = _thread_cpu(engine.thread._thread), _thread_cpu(server.thread)
            s0 = engine.stats()["steps"]
            t = time.perf_counter()
            res, client_cpu = level(server.url, "probe", reqs, c, args.same_process)
            wall = time.perf_counter() - t
            steps = engine.stats()["steps"] - s0
            eng, http = _thread_cpu(engine.thread._thread) - e0, _thread_cpu(server.thread) - h0
            tokens = sum(r["tokens"] for r in res)
            chunks = sum(len(r["itl"]) + 1 for r in res)
            rows.append((c, tokens / wall, c / (args.step_ms / 1e3), eng / tokens * 1e6, http / tokens * 1e6,
                         (client_cpu / tokens * 1e6) if client_cpu is not None else float("nan"), chunks / tokens,
                         steps, wall / steps * 1e3))
    finally:
        server.stop()
        engine.shutdown()
    print(f"\nstep {args.step_ms} ms, clients in {'the same' if args.same_process else 'another'} process")
    print(f"{'clients':>7} {'tok/s':>8} {'ceiling':>8} {'engine us/tok':>14} {'http us/tok':>12} {'client us/tok':>14} "
          f"{'chunks/tok':>10} {'steps':>6} {'ms/step':>8}")
    for r in rows:
        print(f"{r[0]:>7} {r[1]:>8.0f} {r[2]:>8.0f} {r[3]:>14.1f} {r[4]:>12.1f} {r[5]:>14.1f} {r[6]:>10.2f} {r[7]:>6} {r[8]:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
