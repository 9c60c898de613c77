"""Load generator for the OpenAI-compatible server: many concurrent streaming clients,
throughput and latency percentiles, JSON out.

    # against a running server (tilesafe serve ..., or any OpenAI-compatible one)
    PYTHONPATH=src python benchmarks/serve_load.py --url http://127.0.0.1:8000 --model NAME --concurrency 1,8,32
    # self-contained: random weights of a real Qwen3 shape, the server on a thread of this process
    PYTHONPATH=src python benchmarks/serve_load.py --random-weights 4b --concurrency 1,8,32,128 \
        --max-num-seqs 128 --out benchmarks/results/h200/serve_4b.json

Each request is a `/v1/completions` stream (token-id prompts: no tokenizer needed; greedy,
`ignore_eos`, so every request generates exactly its output length) with its prompt and
output lengths drawn uniformly from --prompt-len and --output-len (LO:HI, or one number),
after --shared-prefix N tokens common to every prompt (default 0; a list such as 0,256 runs
every concurrency level once per prefix length, on one server).
At each concurrency level, C clients each send requests back to back until --requests have
been sent (default 4 C, at least --min-requests, 8), after a warm-up round (compiles, captures the decode
graphs). Measured per request on the client: time to first token (TTFT: send to the first
chunk with text), inter-token latency (ITL: between chunks, per token), end to end; per
level: output tokens/s and requests/s over the level's wall time, p50/p90/p99.

With --random-weights and --offline, the same requests also run through the offline engine
in the same batches (`LLM.generate` of C requests at a time, one after another, on the
engine thread between the server's levels; the first batch once untimed, so that its
shapes are compiled), and the server's throughput is reported as a fraction of it. (An
offline batch lasts as long as its longest request; the server refills freed slots at
once, so with mixed output lengths it can beat the offline engine. With one prompt and
output length, `--prompt-len 128 --output-len 64`, every batch has the shapes of the first,
so the offline engine compiles nothing while timed: the like-for-like comparison.) The
in-process server warms up before the first level (the engine's default start-up warm-up:
every decode bucket and the mixed steps of one and two fresh prompts; `startup_s` in the
JSON, with the weights' load) and reports `engine_steps` per level; a table of the levels
ends the output.

--png writes a plot of the levels (throughput, TTFT and ITL percentiles per concurrency, a
line per prefix length) when matplotlib is installed; `--plot JSON` draws it from a JSON
written before, on any machine (`--png` names the file, else the JSON's name with .png).

On the H200, with the server's wheels carried in .whl/ (`bash benchmarks/serve_h200.sh "$OUT"` does this):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=src:/tmp/site timeout 120 python3 benchmarks/serve_load.py --random-weights 4b \
        --concurrency 1,8,32 --shared-prefix 0,256 --prompt-len 64:256 --output-len 32:96 \
        --max-model-len 1024 --max-num-seqs 32 --out benchmarks/results/h200/serve_load_4b.json \
        --png benchmarks/results/h200/serve_load_4b.png
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.plot:
        drawn = _plot(json.loads(Path(args.plot).read_text()), args.png or str(Path(args.plot).with_suffix(".png")))
        return 0 if drawn else 1
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    return run(args, p)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (default: start one in-process, needs --random-weights)")
    p.add_argument("--model", help="model id to send (default: the server's first /v1/models entry)")
    p.add_argument("--random-weights", metavar="SIZE", help="in-process server: a random Qwen3 of this shape")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--kv-blocks", type=int)
    p.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    p.add_argument("--requests", type=int, help="requests per level (default --requests-per-client x concurrency, "
                                                  "at least --min-requests)")
    p.add_argument("--min-requests", type=int, default=8, help="the fewest requests a level sends (default 8)")
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--prompt-len", default="128:512", help="LO:HI or N tokens (uniform)")
    p.add_argument("--output-len", default="128:256", help="LO:HI or N tokens (uniform)")
    p.add_argument("--vocab", type=int, default=1000, help="prompt token ids are drawn below this")
    p.add_argument("--shared-prefix", default="0", metavar="N[,N...]",
                   help="every prompt starts with the same N tokens (the server's prefix cache shares their KV); "
                        "a comma-separated list runs every level once per N")
    p.add_argument("--max-num-batched-tokens", type=int, help="in-process server: tokens per step (chunked prefill)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--offline", action="store_true", help="also run each level's requests through LLM.generate")
    p.add_argument("--client-procs", type=int, default=0,
                   help="processes the clients run in (default: one per 32 clients of the largest level, at most 4)")
    p.add_argument("--in-process-clients", action="store_true",
                   help="run the clients on this process's event loop instead (sharing the in-process server's "
                        "GIL, as serve_load did before: measures what the load generator costs the server)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--png", help="plot the levels here (needs matplotlib)")
    p.add_argument("--plot", metavar="JSON", help="only draw the plot of a JSON written before")
    p.add_argument("--stream-interval", type=int, default=1,
                   help="in-process server: while 64+ requests run, send each one's tokens every N steps")
    p.add_argument("--split-rows", type=int,
                   help="in-process server: steps of fresh prompts with no or >= N decode rows run split "
                        "(prefill graphs, warmed at start-up; up to 4 fresh prompts a step)")
    p.add_argument("--decode-step-tokens", default="default", metavar="T[,T...]",
                   help="in-process server: rows of a step beside decodes (auto, itl, itl@SHARE: itl's bound at "
                        "SHARE of twice the batch-1 step, off, N, or default: the engine's own default, what "
                        "`tilesafe serve` runs); a comma-separated list runs every level once per value, on one "
                        "server")
    p.add_argument("--switch-interval", type=float, metavar="S",
                   help="sys.setswitchinterval for this process (the in-process server's threads share its GIL)")
    return p


def run(args, p) -> int:
    prefixes = [int(x) for x in args.shared_prefix.split(",")]
    settings = [_step_tokens(x) for x in args.decode_step_tokens.split(",")]
    began = time.perf_counter()        # each level's `done_at_s` counts from here: what a run's levels cost

    server = llm = None
    if args.url is None:
        if not args.random_weights:
            p.error("give --url of a running server, or --random-weights SIZE for an in-process one")
        t = time.perf_counter()
        llm, server, args.url, args.model = _start(args)
        startup = time.perf_counter() - t
    levels_c = [int(x) for x in args.concurrency.split(",")]
    clients = Clients(args.client_procs or min(4, -(-max(levels_c) // 32)), args.in_process_clients)
    try:
        httpx = _httpx()
        model = args.model or httpx.get(args.url + "/v1/models").json()["data"][0]["id"]
        rng = random.Random(args.seed)
        levels = []
        report = {"url": args.url, "model": model, "random_weights": args.random_weights,
                  "max_num_seqs": args.max_num_seqs, "prompt_len": args.prompt_len, "output_len": args.output_len,
                  "shared_prefix": prefixes, "max_num_batched_tokens": args.max_num_batched_tokens,
                  "client_procs": 0 if clients.in_process else len(clients.conns), "levels": levels}
        if server is not None:         # load + the engine's start-up warm-up
            report["startup_s"], report["warm_up_s"] = startup, server.engine.core.warm_up_s
            report["stream_interval"], report["split_rows"] = args.stream_interval, args.split_rows
            core = server.engine.core
            report["decode_step_times_s"] = core.decode_step_times
            report["auto_decode_step_tokens"] = core.auto_step_tokens
        warm_rng = random.Random(args.seed + 10 ** 6)     # warm-up prompts of their own: no prefix-cache hits
        offline = {}                   # (prefix, clients): the offline engine's result, run once
        # One client never has a prompt beside decodes: its level runs for the first value only.
        for setting, shared, c in [(t, n, c) for i, t in enumerate(settings) for n in prefixes for c in levels_c
                                   if not (i and c == 1)]:
            rows_s = None
            if server is not None:
                # (the first auto or N warms the row buckets: compiles, so more than call's default minute)
                t = time.perf_counter()
                server.engine.thread.call(lambda core: _apply_step_tokens(core, setting), timeout=900)
                rows_s = time.perf_counter() - t
                # "auto" times the buckets on first use: the report shows them (and the budgets) once there
                report["decode_step_times_s"] = core.decode_step_times
                report["auto_decode_step_tokens"] = core.auto_step_tokens
            n = args.requests or max(args.min_requests, args.requests_per_client * c)
            prefix = _ids(random.Random(args.seed + 1 + shared), shared, args.vocab)
            reqs = [(prefix + _ids(rng, _draw(rng, args.prompt_len), args.vocab), _draw(rng, args.output_len))
                    for _ in range(n)]
            warm = [(prefix + _ids(warm_rng, len(ids) - shared, args.vocab), min(out, 16)) for ids, out in reqs[:c]]
            try:
                level = _measure(args, server, llm, model, reqs, warm, c, shared, clients, offline)
            except Exception as e:     # a failed level is recorded; the others still run
                level = {"concurrency": c, "shared_prefix": shared, "error": f"{type(e).__name__}: {e}"}
            level["decode_step_tokens"] = _label(setting) if server is not None else None
            level["rows_setup_s"], level["done_at_s"] = rows_s, time.perf_counter() - began
            levels.append(level)
            _targets(report)
            print(json.dumps({k: v for k, v in level.items() if k != "engine_trace"}), flush=True)
            if args.out:               # after every level: a run cut short by a timeout keeps what it measured
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        clients.close()
        if server is not None:
            server.stop()
    if args.out:
        print(f"wrote {args.out}", file=sys.stderr)
    if args.png:
        _plot(report, args.png)
    _table(report)
    return 0


def _step_tokens(text: str):
    """A --decode-step-tokens value: "auto", "itl", "itl@SHARE", None (off), "batch2x", "default" or a row count."""
    if text.startswith("itl@"):
        float(text[4:])
        return text
    return None if text == "off" else text if text in ("auto", "itl", "batch2x", "default") else int(text)


def _label(setting) -> str:
    """A level's decode_step_tokens as the table shows it ("default" names what it is)."""
    if setting == "default":
        from tilesafe.serve.engine_core import DEFAULT_DECODE_STEP_TOKENS
        return f"default={'off' if DEFAULT_DECODE_STEP_TOKENS is None else DEFAULT_DECODE_STEP_TOKENS}"
    return str(setting)


def _apply_step_tokens(core, setting) -> None:
    """Set the engine's decode-step rows; "default": the engine's default; "batch2x" (a probe,
    not an engine option): per bucket of a step's decode rows (max_num_seqs rows at most), the
    most rows whose measured step is at most twice that bucket's; "itl@SHARE" (a probe): "itl"
    with its bound at SHARE of twice the batch-1 step instead of row_policy.ITL_SHARE."""
    if setting == "default":
        from tilesafe.serve.engine_core import DEFAULT_DECODE_STEP_TOKENS
        setting = DEFAULT_DECODE_STEP_TOKENS
    if isinstance(setting, str) and setting.startswith("itl@"):
        from tilesafe.serve.row_policy import ItlRows
        core.set_decode_step_tokens("itl")
        core.decode_step_tokens = core.scheduler.row_budget = ItlRows.from_times(core.decode_step_times,
                                                                                 float(setting[4:]))
        return
    if setting != "batch2x":
        core.set_decode_step_tokens(setting)
        return
    from tilesafe.serve.engine_core import rows_within_each
    core.set_decode_step_tokens(None)
    # (an "auto" level before this one timed the row buckets past max_num_seqs too: not batch2x's)
    times = {b: t for b, t in core.decode_step_times.items() if b <= core.llm.max_num_seqs}
    core.scheduler.row_budget = rows_within_each(times, 2.0) or None


def _measure(args, server, llm, model, reqs, warm, c: int, shared: int, clients: "Clients",
             offline: dict | None = None) -> dict:
    """One level: a short warm-up round (prompts of its own), then the requests through the
    server (and the offline engine). The server's side is read around the timed part: its
    engine's steps by kind, the host gaps between decode steps, the CPU time of the engine and
    HTTP threads (and of the whole process), and the clients' CPU time."""
    clients.run(args.url, model, warm, c)
    stats = server.engine.stats() if server is not None else {}
    if server is not None:             # every timed step recorded (EngineCore.trace)
        server.engine.thread.call(lambda core: setattr(core, "trace", []))
    cpu0 = _server_cpu(server)
    results, wall, client_cpu = clients.run(args.url, model, reqs, c)
    level = {**_summary(c, results, wall), "shared_prefix": shared, "client_cpu_s": client_cpu}
    if server is not None:             # prompt blocks whose KV the prefix cache held; engine steps
        after = server.engine.stats()
        trace = server.engine.thread.call(lambda core: (core.trace, setattr(core, "trace", None))[0])
        level.update(_trace_summary(trace, server.engine.core.decode_step_times))
        level["server_cpu_s"] = {k: v - cpu0[k] for k, v in _server_cpu(server).items()}
        level["prefix_cache_hit_blocks"] = after["prefix_cache_hits"] - stats["prefix_cache_hits"]
        level["engine_steps"] = after["steps"] - stats["steps"]
        level["step_timing"] = {k: [a - b for a, b in zip(v, stats["step_timing"].get(k, [0, 0.0, 0]))]
                                for k, v in after["step_timing"].items()}   # kind: [steps, wall s, rows]
        gaps = [a - b for a, b in zip(after["decode_gaps"], stats["decode_gaps"])]
        level["decode_gap_us"] = gaps[1] / gaps[0] * 1e6 if gaps[0] else None
        level["hbm_roofline"] = _roofline(llm, reqs, c, level)
    if args.offline and server is not None:
        key = (shared, c)
        if offline is None or key not in offline:       # the same requests at every decode_step_tokens
            result = _offline(server, llm, reqs, c)
            if offline is not None:
                offline[key] = result
        speed, warm_s = offline[key] if offline is not None else result
        level["offline_output_tokens_per_s"], level["offline_warmup_s"] = speed, warm_s
        level["server_vs_offline"] = level["output_tokens_per_s"] / level["offline_output_tokens_per_s"]
    return level


def _trace_summary(trace: list, step_times: dict) -> dict:
    """What the engine-side inter-token gaps are made of, from the level's steps (EngineCore.trace:
    kind, rows, decode rows, start, end). A step's decode rows each get a token one step after
    their last, so each waits the time from the previous step's end to this one's end: the step
    itself (`step`: scheduling, launch, device, outputs of the step before) plus the host time
    before it (`host`: the engine thread between steps — commands, the GIL). `engine_gap_s`: the
    percentiles of that gap over decode tokens (the client's ITL less the HTTP delivery: with a
    stream interval, one chunk per several steps); `slowest_1pct`: per kind of step, the tokens
    of the slowest 1% of gaps [tokens, gap, step, host ms, rows]; `over_bound`: tokens whose gap
    passed twice the timed batch-1 step (issue 19's bound), per kind; `engine_trace`: the steps
    (kind, rows, decode rows, start, end ms from the first start)."""
    if not trace:
        return {}
    t0 = trace[0][3]
    gaps = []                          # (gap s, decode tokens, kind, step s, host s, rows)
    for prev, cur in zip(trace, trace[1:]):
        kind, rows, d, began, end = cur
        if d:
            gaps.append((end - prev[4], d, kind, end - began, began - prev[4], rows))
    out = {"engine_trace": [[k, r, d, round((b - t0) * 1e3, 3), round((e - t0) * 1e3, 3)] for k, r, d, b, e in trace]}
    if not gaps:
        return out
    gaps.sort()
    total = sum(g[1] for g in gaps)

    def pct(f):
        seen = 0
        for g in gaps:
            seen += g[1]
            if seen > f * total:
                return g[0]
        return gaps[-1][0]
    out["engine_gap_s"] = {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99)}

    def by_kind(sel):
        agg = {}
        for gap, d, kind, step, host, rows in sel:
            a = agg.setdefault(kind, [0, 0.0, 0.0, 0.0, 0.0])
            a[0] += d
            for i, v in enumerate((gap * 1e3, step * 1e3, host * 1e3, rows), 1):
                a[i] += v * d
        return {k: [a[0]] + [round(v / a[0], 3) for v in a[1:]] for k, a in agg.items()}
    cut = pct(0.99)
    out["slowest_1pct"] = by_kind([g for g in gaps if g[0] >= cut])
    if step_times:
        bound = 2 * step_times[min(step_times)]
        out["over_bound"] = {"bound_s": bound, **by_kind([g for g in gaps if g[0] > bound])}
    return out


def _server_cpu(server) -> dict:
    """CPU seconds so far of the in-process server's engine thread, HTTP thread, whole process."""
    if server is None:
        return {}

    def thread(t):
        return time.clock_gettime(time.pthread_getcpuclockid(t.ident)) if t.is_alive() else 0.0
    return {"engine": thread(server.engine.thread._thread), "http": thread(server.thread),
            "process": time.process_time()}


HBM_BYTES_PER_S = 4.8e12      # the H200's nominal bandwidth (benchmarks/engine.py counts the same way)


def _roofline(llm, reqs, c: int, level: dict) -> dict:
    """Issue 19's decode target: the bytes a step of c sequences reads (every weight once, plus
    the batch's KV at the level's mean context: prompt + half the output) over the nominal
    bandwidth give the fastest step, c tokens each; `fraction`: the level's end-to-end output
    tokens/s against that. `decode_step_fraction`: the engine's own decode steps (wall time,
    host included) against the ideal step of their mean batch."""
    from tilesafe.engine.checkpoint import weight_bytes
    cfg = llm.config
    size = llm.dtype.itemsize
    weights = weight_bytes(cfg, size)
    kv_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * size
    context = statistics.fmean(len(ids) + out / 2 for ids, out in reqs)
    ideal = (weights + c * context * kv_token) / HBM_BYTES_PER_S
    out = {"weight_bytes": weights, "kv_bytes": c * context * kv_token, "ideal_step_s": ideal,
           "roofline_tokens_per_s": c / ideal, "fraction": level["output_tokens_per_s"] * ideal / c}
    steps, secs, rows = level["step_timing"].get("decode", [0, 0.0, 0])
    if steps:
        batch = rows / steps
        out["decode_steps"], out["decode_mean_batch"], out["decode_step_s"] = steps, batch, secs / steps
        out["decode_step_fraction"] = (weights + batch * context * kv_token) / HBM_BYTES_PER_S / (secs / steps)
    return out


def _targets(report: dict) -> None:
    """Issue 19's targets, from the levels: the server within 5% of the offline engine at every
    level; p99 inter-token latency at 32 clients under 2x the batch-1 step (the 1-client
    level's mean decode step, host included); decode at >= 70% of the HBM roofline at 32 and
    128 clients. The p99 is taken over the gaps between chunks (a chunk that joins several
    steps' tokens counts as one gap: what the user waits), and over tokens. With several
    --decode-step-tokens values, per value (`targets_by_decode_step_tokens`); `targets`: the
    first value's."""
    levels = [x for x in report["levels"] if "error" not in x and x.get("shared_prefix", 0) == 0]
    one = next((x["step_timing"]["decode"] for x in levels if x["concurrency"] == 1
                and x.get("step_timing", {}).get("decode", [0])[0]), None)
    settings = list(dict.fromkeys(x.get("decode_step_tokens") for x in levels))
    by = {str(v): _targets_of({x["concurrency"]: x for x in levels if x.get("decode_step_tokens") == v}, one)
          for v in settings}
    report["targets"] = by[str(settings[0])] if settings else {}
    if len(settings) > 1:
        report["targets_by_decode_step_tokens"] = by


def _targets_of(lv: dict, one) -> dict:
    t = {"server_vs_offline": {c: x.get("server_vs_offline") for c, x in lv.items()}}
    if one and 32 in lv:
        step = one[1] / one[0]
        t["batch1_step_s"] = step
        t["itl_p99_32_s"] = lv[32]["itl_s"].get("p99")
        t["chunk_gap_p99_32_s"] = gap = lv[32]["chunk_gap_s"].get("p99")
        t["itl_p99_32_over_2x_batch1_step"] = gap / (2 * step) if gap else None
    t["roofline_fraction"] = {c: lv[c]["hbm_roofline"]["fraction"] for c in (32, 128)
                              if c in lv and "hbm_roofline" in lv[c]}
    return t


def _table(report: dict) -> None:
    """The levels in a few columns (also when some failed), then the targets."""
    print(f"\n{report['model']}  start-up {report.get('startup_s', float('nan')):.1f} s "
          f"(engine warm-up {report.get('warm_up_s', float('nan')):.1f} s)  "
          f"client processes {report.get('client_procs')}  decode step ms by rows "
          f"{_step_times(report)} (auto: {report.get('auto_decode_step_tokens')} rows)", file=sys.stderr)
    print(f"{'rows':>4} {'clients':>7} {'prefix':>6} {'tok/s':>7} {'offline':>7} {'ratio':>5} {'TTFT50':>7} "
          f"{'TTFT99':>7} {'ITL50':>6} {'ITL99':>6} {'gap99':>6} {'tok/ch':>6} {'roof':>5} {'steps':>5} {'gap us':>6} "
          f"{'eng/http/cli cpu s':>19}  (ms)", file=sys.stderr)
    nan = float("nan")
    for lv in report["levels"]:
        if "error" in lv:
            print(f"{str(lv.get('decode_step_tokens')):>4} {lv['concurrency']:>7} {lv['shared_prefix']:>6}  "
                  f"error: {lv['error'][:100]}", file=sys.stderr)
            continue
        ms = lambda d, k: d.get(k, nan) * 1e3   # noqa: E731
        cpu = lv.get("server_cpu_s", {})
        print(f"{str(lv.get('decode_step_tokens')):>4} {lv['concurrency']:>7} {lv['shared_prefix']:>6} "
              f"{lv['output_tokens_per_s']:>7.0f} "
              f"{lv.get('offline_output_tokens_per_s', nan):>7.0f} {lv.get('server_vs_offline', nan):>5.2f} "
              f"{ms(lv['ttft_s'], 'p50'):>7.1f} {ms(lv['ttft_s'], 'p99'):>7.1f} {ms(lv['itl_s'], 'p50'):>6.2f} "
              f"{ms(lv['itl_s'], 'p99'):>6.2f} {ms(lv['chunk_gap_s'], 'p99'):>6.2f} {lv['tokens_per_chunk']:>6.2f} "
              f"{lv.get('hbm_roofline', {}).get('fraction', nan):>5.2f} {lv.get('engine_steps', 0):>5} "
              f"{lv.get('decode_gap_us') or nan:>6.0f} {cpu.get('engine', nan):>6.2f}/{cpu.get('http', nan):.2f}/"
              f"{lv.get('client_cpu_s') or nan:.2f}", file=sys.stderr)
    for lv in report["levels"]:
        if "step_timing" in lv:
            kinds = ", ".join(f"{k} {v[0]} x {v[1] / max(v[0], 1) * 1e3:.2f} ms ({v[2] / max(v[0], 1):.0f} rows)"
                              for k, v in sorted(lv["step_timing"].items()))
            print(f"  {str(lv.get('decode_step_tokens')):>4} rows, {lv['concurrency']:>4} clients: {kinds}; "
                  f"offline warm-up {lv.get('offline_warmup_s', nan):.2f} s; done at "
                  f"{lv.get('done_at_s') or nan:.1f} s (rows set up {lv.get('rows_setup_s') or nan:.1f} s)",
                  file=sys.stderr)
        if "engine_gap_s" in lv:       # [tokens, gap, step, host ms, rows] per kind
            g = lv["engine_gap_s"]
            slow = "; ".join(f"{k} {v[0]} tok {v[1]:.2f} ms (step {v[2]:.2f} + host {v[3]:.2f}, {v[4]:.0f} rows)"
                             for k, v in lv["slowest_1pct"].items())
            over = lv.get("over_bound", {})
            print(f"       engine gaps p50/p90/p99 {g['p50'] * 1e3:.2f}/{g['p90'] * 1e3:.2f}/{g['p99'] * 1e3:.2f} ms; "
                  f"slowest 1%: {slow}; over {over.get('bound_s', nan) * 1e3:.2f} ms: "
                  f"{ {k: v[0] for k, v in over.items() if k != 'bound_s'} }", file=sys.stderr)
    print(f"targets: {json.dumps(report.get('targets', {}))}", file=sys.stderr)
    for v, t in report.get("targets_by_decode_step_tokens", {}).items():
        print(f"  rows {v}: ratio {json.dumps(t['server_vs_offline'])}, ITL p99 at 32 / 2x batch-1 step "
              f"{t.get('itl_p99_32_over_2x_batch1_step')}, roofline {json.dumps(t['roofline_fraction'])}",
              file=sys.stderr)


def _step_times(report: dict) -> str:
    times = report.get("decode_step_times_s") or {}
    return " ".join(f"{b}:{t * 1e3:.2f}" for b, t in times.items()) or "-"


def _httpx():
    """The HTTP client: httpx2 (what the openai client uses, and what is carried to the GPU
    machine), else httpx (the same API)."""
    try:
        import httpx2
        return httpx2
    except ImportError:
        import httpx
        return httpx


def _plot(report: dict, path: str) -> bool:
    """Output tokens/s (the offline engine's dotted), TTFT and ITL (p50 solid, p99 dashed)
    against concurrency, a line per decode-step rows value and shared-prefix length; False (and
    a note) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no matplotlib here: not drawing {path} (run --plot JSON where it is installed)", file=sys.stderr)
        return False
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    good = [lv for lv in report["levels"] if "error" not in lv]
    values = list(dict.fromkeys(str(lv.get("decode_step_tokens")) for lv in good))
    for value, shared in [(v, n) for v in values for n in sorted({lv.get("shared_prefix", 0) for lv in good})]:
        lvs = sorted((lv for lv in good if lv.get("shared_prefix", 0) == shared
                      and str(lv.get("decode_step_tokens")) == value), key=lambda lv: lv["concurrency"])
        if not lvs:
            continue
        cs = [lv["concurrency"] for lv in lvs]
        label = (f"shared prefix {shared}" if shared else "no shared prefix") + \
            (f", rows {'off' if value == 'None' else value}" if len(values) > 1 else "")
        line, = axes[0].plot(cs, [lv["output_tokens_per_s"] for lv in lvs], "o-", label=label)
        if value == values[0] and any("offline_output_tokens_per_s" in lv for lv in lvs):
            axes[0].plot(cs, [lv.get("offline_output_tokens_per_s", float("nan")) for lv in lvs], ":",
                         color=line.get_color(), label=f"{label}, offline")
        for ax, key in ((axes[1], "ttft_s"), (axes[2], "itl_s")):
            ax.plot(cs, [lv[key].get("p50", float("nan")) * 1e3 for lv in lvs], "o-", color=line.get_color(),
                    label=f"{label}, p50")
            ax.plot(cs, [lv[key].get("p99", float("nan")) * 1e3 for lv in lvs], "s--", color=line.get_color(),
                    label=f"{label}, p99")
    for ax, title in zip(axes, ("output tokens/s", "time to first token (ms)", "inter-token latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{report['model']}: prompts {report['prompt_len']}, outputs {report['output_len']} tokens, "
                 f"max {report['max_num_seqs']} sequences")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)
    return True


def _start(args):
    from tilesafe.engine import LLM
    from tilesafe.serve import AsyncLLM, BackgroundServer, ServerMetrics, build_app
    t = time.perf_counter()
    llm = LLM.from_random(args.random_weights, device=args.device, dtype=args.dtype, max_model_len=args.max_model_len,
                          max_num_seqs=args.max_num_seqs, progress=False)
    name = f"qwen3-{args.random_weights}-random"
    metrics = ServerMetrics(name)
    engine = AsyncLLM(llm, kv_blocks=args.kv_blocks, metrics=metrics,
                      max_num_batched_tokens=args.max_num_batched_tokens,
                      stream_interval=getattr(args, "stream_interval", 1), split_rows=getattr(args, "split_rows", None))
    server = BackgroundServer(build_app(engine, name, metrics))
    server.engine = engine
    print(f"in-process server for {name} at {server.url} ({time.perf_counter() - t:.1f} s to load)", file=sys.stderr)
    return llm, server, server.url, name


def _offline(server, llm, reqs, c: int) -> tuple[float, float]:
    """Output tokens/s of the same requests through LLM.generate, c at a time, run on the
    engine thread between steps (the two must not use the model at once); and the seconds of
    its untimed warm-up (the first batch once: its prefill and decode shapes compiled)."""
    from tilesafe.engine import SamplingParams

    def run(core):
        prompts = [{"prompt_token_ids": ids} for ids, _ in reqs]
        params = [SamplingParams(temperature=0, max_tokens=out, ignore_eos=True) for _, out in reqs]
        sync = _sync(llm)
        w = time.perf_counter()
        # Untimed: the first batch's prefill and decode shapes compiled and captured (a few tokens
        # run each decode step eagerly, then captured; the outputs' length changes no shape).
        llm.generate(prompts[:c], [SamplingParams(temperature=0, max_tokens=min(out, 4), ignore_eos=True)
                                   for _, out in reqs[:c]])
        sync()
        warm = time.perf_counter() - w
        t, tokens = time.perf_counter(), 0
        for i in range(0, len(prompts), c):
            outs = llm.generate(prompts[i:i + c], params[i:i + c])
            tokens += sum(len(o.outputs[0].token_ids) for o in outs)
        sync()
        speed = tokens / (time.perf_counter() - t)
        core.reset_prefix_cache()         # generate() rewrote the KV buffers and the sampler's rows
        return speed, warm
    return server.engine.thread.call(run, timeout=3600)


def _sync(llm):
    if llm.device.startswith("cuda"):
        import torch
        return torch.cuda.synchronize
    return lambda: None


class Clients:
    """Where the load runs: `procs` worker processes (spawned once, each taking its share of a
    level's clients and requests), so that the clients' CPU (HTTP parsing, JSON: about as much
    per token as the server's) does not share the in-process server's GIL; or, `in_process`,
    this process's own event loop. `run` returns the results, the wall time from sending the
    level to the last answer, and the clients' CPU seconds."""

    def __init__(self, procs: int, in_process: bool = False):
        self.in_process, self.conns, self.procs = in_process, [], []
        if not in_process:
            ctx = mp.get_context("spawn")
            for _ in range(max(procs, 1)):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_client_worker, args=(theirs,), daemon=True)
                proc.start()
                self.conns.append(mine)
                self.procs.append(proc)

    def run(self, url: str, model: str, reqs, c: int):
        if self.in_process:
            t = time.perf_counter()
            results = asyncio.run(_level(url, model, reqs, c))
            return results, time.perf_counter() - t, None
        n = min(len(self.conns), c)
        t = time.perf_counter()
        for i in range(n):
            self.conns[i].send((url, model, reqs[i::n], c // n + (i < c % n)))
        answers = [self.conns[i].recv() for i in range(n)]
        wall = time.perf_counter() - t
        for a in answers:
            if isinstance(a, BaseException):
                raise a
        return [r for results, _ in answers for r in results], wall, sum(cpu for _, cpu in answers)

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(5)


def _client_worker(conn) -> None:
    """A client process: runs each level it is sent, answers (results, CPU seconds) or the error."""
    while True:
        job = conn.recv()
        if job is None:
            return
        url, model, reqs, c = job
        try:
            cpu = time.process_time()
            results = asyncio.run(_level(url, model, reqs, c))
            conn.send((results, time.process_time() - cpu))
        except Exception as e:
            conn.send(RuntimeError(f"client process: {type(e).__name__}: {e}"))


async def _level(url: str, model: str, reqs, concurrency: int):
    httpx = _httpx()
    queue = list(reversed(reqs))
    results = []
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(3600.0), limits=limits) as client:
        async def worker():
            while queue:
                ids, out = queue.pop()
                results.append(await _one(client, model, ids, out))
        await asyncio.gather(*[worker() for _ in range(concurrency)])
    return results


async def _one(client, model: str, ids, max_tokens: int) -> dict:
    """One streamed request. Each chunk's usage (continuous_usage_stats) says how many tokens
    it brought (a server that fell behind joins several steps' tokens into one chunk); without
    it a chunk with text counts one. `itl`: each token's share of the gap before its chunk;
    `gaps`: the gaps between chunks (what the reader waits)."""
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    sent = time.perf_counter()
    first = last = None
    itl, gaps, tokens, seen, chunks = [], [], 0, 0, 0
    async with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            now = time.perf_counter()
            usage = chunk.get("usage")
            if usage:
                tokens = usage["completion_tokens"]
            if not chunk["choices"]:
                continue
            k = tokens - seen if usage else int(bool(chunk["choices"][0]["text"]))
            if k <= 0:
                continue
            seen += k
            chunks += 1
            if first is None:
                first = now
            else:
                gaps.append(now - last)
                itl += [(now - last) / k] * k
            last = now
    return {"ttft": (first or time.perf_counter()) - sent, "itl": itl, "gaps": gaps, "chunks": chunks,
            "e2e": time.perf_counter() - sent, "tokens": tokens or seen, "prompt": len(ids)}


def _summary(c: int, results, wall: float) -> dict:
    tokens = sum(r["tokens"] for r in results)
    itl = [x for r in results for x in r["itl"]]
    return {"concurrency": c, "requests": len(results), "wall_s": wall, "output_tokens": tokens,
            "output_tokens_per_s": tokens / wall, "requests_per_s": len(results) / wall,
            "prompt_tokens": sum(r["prompt"] for r in results),
            "tokens_per_chunk": tokens / max(sum(r["chunks"] for r in results), 1),
            "ttft_s": _pct([r["ttft"] for r in results]), "itl_s": _pct(itl),
            "chunk_gap_s": _pct([x for r in results for x in r["gaps"]]), "e2e_s": _pct([r["e2e"] for r in results])}


def _pct(xs) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)

    def q(f):
        return xs[min(len(xs) - 1, int(f * len(xs)))]
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "mean": statistics.fmean(xs)}


def _draw(rng: random.Random, spec: str) -> int:
    lo, _, hi = spec.partition(":")
    return rng.randint(int(lo), int(hi or lo))


def _ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


if __name__ == "__main__":
    sys.exit(main())
