"""A CPU model of a serve_load level: the real `Scheduler` (as after the default warm-up:
two fresh prompts a mixed step, the row buckets up to 3 x max_num_seqs) driven by a closed
loop of C clients, each sending its requests back to back, with each step's time taken from
measured step costs instead of a GPU. It compares decode-step row policies (off, auto, itl
at a share, a fixed row count) on the columns issue 19 judges — output tokens/s, time to
first token and inter-token gap percentiles — before spending device time on them.

Step times (ms): a decode or row step of b rows (its bucket) costs the bucket's timed replay
(`BUCKET_MS`: session 19's H200 4B mid round, or a serve_load JSON's decode_step_times_s)
plus host time 0.5 + 0.003 b (session 19: 32-row decode steps 3.83 ms wall over a 3.26 ms
replay, 249-384-row steps ~1.6 ms over theirs); a mixed step the decode rows' step plus
MIXED_MS_PER_PROMPT per 128 prompt tokens (32 clients: 278-row mixed steps 8.3 ms). The
model has no HTTP delivery: measured p99 gaps ran ~1-1.5 ms above it (session 19: 128-row
steps at 32 clients, model 4.76 ms, measured 6.15; off 8.26 against 9.99).

    PYTHONPATH=src python benchmarks/probes/serve_policy_model.py [serve_load.json]
"""
from __future__ import annotations

import heapq
import json
import sys
from collections import Counter
from types import SimpleNamespace

from tilesafe.serve.engine_core import rows_within_each
from tilesafe.serve.request import Request
from tilesafe.serve.row_policy import ItlRows
from tilesafe.serve.scheduler import Scheduler

BUCKET_MS = {1: 2.62, 2: 3.05, 4: 2.98, 8: 3.20, 16: 3.29, 32: 3.26, 64: 3.34, 128: 3.88, 256: 5.84, 384: 7.50}
MIXED_MS_PER_PROMPT = 2.2
POLICIES = [None, "auto", "itl@0.7", "itl@1.0", 128]


def level(policy, clients: int, bucket_ms: dict[int, float] = BUCKET_MS, requests_per_client: int = 2,
          prompt: int = 128, output: int = 64, max_num_seqs: int = 128, batched_tokens: int = 512) -> dict:
    """One modelled level: its tokens/s, TTFT and gap percentiles (ms) and steps by kind."""
    buckets = sorted(bucket_ms)
    s = Scheduler(max_num_seqs, prompt + output, max_num_seqs * -(-(prompt + output) // 16) + 64, 16,
                  batched_tokens, True, max_fresh=2, row_buckets=buckets)
    seconds = {b: t / 1e3 for b, t in bucket_ms.items()}
    if policy == "auto":
        s.row_budget = rows_within_each(seconds, 2.0)
    elif isinstance(policy, str) and policy.startswith("itl@"):     # (the decode buckets only, as EngineCore)
        s.row_buckets = [b for b in buckets if b <= max_num_seqs]
        s.row_budget = ItlRows.from_times({b: seconds[b] for b in s.row_buckets}, float(policy[4:]))
    else:
        s.row_budget = policy

    def step_ms(rows: int) -> float:
        b = next((c for c in buckets if c >= rows), buckets[-1])
        return bucket_ms[b] + 0.5 + 0.003 * b
    now, count, arrivals, info = 0.0, 0, [], {}
    left = dict.fromkeys(range(clients), requests_per_client)

    def send(client: int, at: float) -> None:
        nonlocal count
        count += 1
        left[client] -= 1
        seq = SimpleNamespace(prompt_ids=[(count * 7 + i) % 1000 + 1 for i in range(prompt)], tokens=[],
                              params=SimpleNamespace(max_tokens=output))
        req = Request(f"r{count}", seq, sink=None, order=count, arrival=at)
        info[req.request_id] = [client, None]          # its client, its last token's time
        heapq.heappush(arrivals, (at, count, req))
    for c in range(clients):
        send(c, 0.0)
    ttft, gaps, kinds, tokens = [], [], Counter(), 0
    while arrivals or s.has_work():
        while arrivals and arrivals[0][0] <= now:
            s.add(heapq.heappop(arrivals)[2])
        if not s.has_work():
            now = arrivals[0][0]
            continue
        plan = s.schedule()
        d = len(plan.decode)
        if plan.prefill and not plan.rows:
            now += step_ms(max(d, 1)) + MIXED_MS_PER_PROMPT * sum(n for _, n in plan.prefill) / 128
            kinds["mixed"] += 1
        else:
            now += step_ms(plan.num_tokens)
            kinds["rows" if plan.prefill else "decode"] += 1
        sampled = [r for r, n in plan.prefill if r.uncomputed == n] + plan.decode
        for r, n in plan.prefill:
            s.computed(r, n)
        for r in plan.decode:
            s.computed(r, 1)
        for r in sampled:
            r.seq.tokens.append(5)
            tokens += 1
            last = info[r.request_id]
            (ttft if last[1] is None else gaps).append(now - (r.arrival if last[1] is None else last[1]))
            last[1] = now
            if len(r.seq.tokens) >= output:
                s.finish(r)
                if left[last[0]]:
                    send(last[0], now + 0.3)

    def pct(xs, f):
        return sorted(xs)[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")
    return {"tokens_per_s": tokens / now * 1e3, "ttft_p50": pct(ttft, 0.5), "ttft_p99": pct(ttft, 0.99),
            "gap_p50": pct(gaps, 0.5), "gap_p99": pct(gaps, 0.99), "steps": dict(kinds)}


def main(argv: list[str]) -> None:
    bucket_ms = BUCKET_MS
    if argv:
        times = json.loads(open(argv[0]).read()).get("decode_step_times_s") or {}
        bucket_ms = {int(b): t * 1e3 for b, t in times.items()} or BUCKET_MS
    print(f"{'policy':>8} {'clients':>7} {'tok/s':>7} {'TTFT50':>7} {'TTFT99':>7} {'gap50':>6} {'gap99':>6}  steps")
    for c in (32, 128):
        for policy in POLICIES:
            try:
                r = level(policy, c, bucket_ms)
            except Exception as e:      # one failed case is a row; the others still run
                print(f"{str(policy):>8} {c:>7} failed: {type(e).__name__}: {e}")
                continue
            print(f"{str(policy):>8} {c:>7} {r['tokens_per_s']:>7.0f} {r['ttft_p50']:>7.1f} {r['ttft_p99']:>7.1f} "
                  f"{r['gap_p50']:>6.2f} {r['gap_p99']:>6.2f}  {r['steps']}")


if __name__ == "__main__":
    main(sys.argv[1:])
