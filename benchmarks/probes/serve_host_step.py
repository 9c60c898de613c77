"""Host time of one serving-engine step, device work stubbed out (CPU).

    PYTHONPATH=src python benchmarks/probes/serve_host_step.py --batch 1,8,32,128 [--profile]

A random tiny Qwen3 (Qwen3's tokenizer, so detokenizing is real) serves `batch` greedy
requests that all decode; the model's decode and prefill are replaced by a stand-in that
writes plausible tokens, so what is timed is everything the engine thread does around the
GPU: scheduling, block tables and slot mapping, staging the inputs, sampler rows,
appending tokens, stop checks (detokenizing too with --detok-on-engine: AsyncLLM leaves it
to the event loop for requests without stop strings), outputs to an asyncio loop on another thread
(through AsyncLLM's mailbox: one loop wake-up a step; `--wake-per-output` posts each with
its own call_soon_threadsafe, as AsyncLLM did before), metrics. Prints the engine thread's
CPU µs per decode step (median of the steady-state steps; CPU time, so other processes on
a busy host do not count) and, with --profile, the top functions by own time.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import threading
import time


def stub_model():
    """Replace the model's device work with writes of plausible tokens (no kernels)."""
    from tilesafe.engine.model import Qwen3Model

    def decode(self, a, workspace, greedy=False):       # one cheap op: each row echoes its fed-back token
        a.tokens.copy_(a.ids)

    def prefill_paged(self, a, starts, cached, tables):
        a.tokens.fill_(1234)
        a.chosen.zero_()
    Qwen3Model.decode, Qwen3Model.prefill_paged = decode, prefill_paged


class _Collected(list):
    put_nowait = list.append


def measure(batch: int, steps: int, profile: bool, metrics: bool, wake_per_output: bool = False,
            detok_on_engine: bool = False) -> dict:
    from tilesafe.engine import LLM, SamplingParams
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.metrics import ServerMetrics
    from tilesafe.serve.mailbox import mailbox_for
    from tilesafe.serve.request import Request
    llm = LLM.from_random("tiny", device="cpu", max_model_len=1024, max_num_seqs=batch, progress=False)
    core = EngineCore(llm, block_size=16, metrics=ServerMetrics("probe") if metrics else None, warm_up=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    received = _Collected()
    box = mailbox_for(loop)

    def sink(out):
        if wake_per_output:
            loop.call_soon_threadsafe(received.append, out)
        else:
            box.post(received, out)
    params = SamplingParams(temperature=0, max_tokens=steps + 50, ignore_eos=True)
    for i in range(batch):
        seq = llm._sequences({"prompt_token_ids": [100 + i + 7 * j for j in range(40)]}, params)[0]
        if not detok_on_engine:        # as AsyncLLM does for a request without stop strings: the loop detokenizes
            seq.detokenizer = None
        core.add(Request(f"r{i}", seq, sink=sink))
    while any(r.uncomputed > 1 for r in core.scheduler.running) or core.scheduler.waiting:
        core.step()                                    # prefill: every request admitted and decoding
    for _ in range(5):
        core.step()
    times = []
    prof = cProfile.Profile() if profile else None
    for _ in range(steps):
        t = time.thread_time()             # this thread's CPU time: other processes on a busy host do not count
        if prof:
            prof.enable()
        core.step()
        if prof:
            prof.disable()
        times.append(time.thread_time() - t)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    if prof:
        print(f"\n--- batch {batch}: top functions by own time ({steps} steps) ---")
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return {"batch": batch, "us_per_step": statistics.median(times) * 1e6,
            "us_per_token": statistics.median(times) * 1e6 / batch, "outputs": len(received)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", default="1,8,32,128")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--wake-per-output", action="store_true", help="one call_soon_threadsafe per output (the old sink)")
    p.add_argument("--detok-on-engine", action="store_true", help="detokenize on the engine thread (as before)")
    args = p.parse_args(argv)
    stub_model()
    rows = [measure(int(b), args.steps, args.profile, not args.no_metrics, args.wake_per_output, args.detok_on_engine)
            for b in args.batch.split(",")]
    print(f"\n{'batch':>6} {'host us/step':>13} {'us/token':>9}")
    for r in rows:
        print(f"{r['batch']:>6} {r['us_per_step']:>13.1f} {r['us_per_token']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
