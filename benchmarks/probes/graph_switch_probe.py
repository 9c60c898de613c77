"""Probe: what a serving decode step costs when the step before it replayed another bucket's
graph. Session 20's serve_load traces (H200, 4B) had the first decode step in a new bucket
0.8-2.8 ms slower than the same bucket's next steps (32 clients: 5.31 against 3.71 ms), at one
row as at 22 — so probably not the rows' host work. This replays the serving engine's
captured greedy decode steps (all rows padding, as `ModelRunner.time_decode_buckets`) in
patterns and times each replay on the host (launch to sync) and on the device (CUDA events
around the launch):

- `same`: bucket B after B (the steady step);
- `after A`: bucket B right after one replay of bucket A (a switch);
- `after A x4`: B after four replays of A.

One random Qwen3 engine (argv[2], default 4b; argv[3] the device, default cuda; cpu: a dry run)
with 128 sequences of 256 positions; the serving runner's decode buckets captured (greedy
only); pairs (A, B) from PAIRS; REPS replays each, the median reported; every case catches its
own errors; a table at the end; argv[1] the JSON.
    PYTHONPATH=src python3 benchmarks/probes/graph_switch_probe.py "$OUT/serve3_switch.json" 4b
"""
import json
import statistics
import sys
import time
import traceback

import torch

PAIRS = [(32, 128), (128, 32), (32, 16), (16, 8), (8, 4), (2, 1), (1, 2), (64, 32)]
REPS = 7


def replay(dec, b: int) -> tuple[float, float]:
    """One replay of bucket b's greedy step: (host seconds launch to sync, device seconds)."""
    step = dec.steps[b]
    cuda = torch.cuda.is_available()
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    step.io.send_paged([], [], [], [])
    if cuda:
        start.record()
    dec._launch(step, step.io.batch, True)
    if cuda:
        end.record()
    step.io.receive(0)
    return time.perf_counter() - t, start.elapsed_time(end) / 1e3 if cuda else float("nan")


def case(dec, a: int, b: int) -> dict:
    """Bucket b timed steady, right after one replay of a, and after four of a."""
    out = {}
    for name, before in (("same", [b]), ("after A", [a]), ("after A x4", [a] * 4)):
        host, dev = [], []
        for _ in range(REPS):
            for x in before:
                replay(dec, x)
            h, d = replay(dec, b)
            host.append(h)
            dev.append(d)
        out[name] = {"host_ms": statistics.median(host) * 1e3, "device_ms": statistics.median(dev) * 1e3}
    return out


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "graph_switch.json"
    size = sys.argv[2] if len(sys.argv) > 2 else "4b"
    device = sys.argv[3] if len(sys.argv) > 3 else "cuda"            # (cpu: a dry run of the probe itself)
    from tilesafe.engine import LLM
    from tilesafe.serve.engine_core import EngineCore
    t0 = time.perf_counter()
    llm = LLM.from_random(size, device=device, max_model_len=256, max_num_seqs=128, progress=False)
    core = EngineCore(llm, kv_blocks=None, block_size=16, max_num_batched_tokens=512, warm_up=False)
    dec = core.runner.decoder
    with llm.on_device(), torch.inference_mode():
        dec.warm_up(greedy=(True,))                    # every decode bucket captured (greedy)
        print(f"{size}: buckets {dec.sizes} captured in {time.perf_counter() - t0:.1f} s", flush=True)
        results = {}
        for a, b in PAIRS:
            try:
                results[f"{a}->{b}"] = case(dec, a, b)
            except Exception as e:               # one case's failure leaves the others
                traceback.print_exc()
                results[f"{a}->{b}"] = {"error": f"{type(e).__name__}: {e}"}
            with open(path, "w") as f:
                json.dump({"size": size, "reps": REPS, "results": results}, f, indent=1)
    print(f"\n{'A -> B':>10} {'same host/dev ms':>18} {'after A':>16} {'after A x4':>16}")
    for k, r in results.items():
        if "error" in r:
            print(f"{k:>10} error: {r['error'][:90]}")
            continue
        cols = [f"{r[n]['host_ms']:6.2f}/{r[n]['device_ms']:6.2f}" for n in ("same", "after A", "after A x4")]
        print(f"{k:>10} {cols[0]:>18} {cols[1]:>16} {cols[2]:>16}")


if __name__ == "__main__":
    main()
