"""Where the server loses against the offline engine: one in-process server, each level run
with its load generator in other processes, in variants of the HTTP stack and the prefill
step form (GPU).

    PYTHONPATH=src:/tmp/site python benchmarks/probes/serve_ab.py --random-weights 4b --concurrency 1,8,32,128

serve_load's levels (`serve_load.py --help` takes the same flags; defaults here: prompt 128,
output 64, 128 sequences, 512 tokens a step, 2 requests per client) with --offline once per
level, then the server again per variant: `auto` (uvicorn's default: httptools and uvloop
when installed), `h11` (a second HTTP server of the same engine on h11 and asyncio, as the
H200 ran before), `split` (the prefill graphs warmed first, timed; steps of fresh prompts
run split when they have no decode rows or >= --split-rows, and up to 4 fresh prompts a
step), and at 64 clients or more `stream2` and `split+s2` (each request's tokens sent every
other step while 64 or more run: EngineCore.stream_interval 2). Variants other than `auto`
run only at the levels of --ab-levels (default 1,32,128).
Prints serve_load's table (one row per variant) at the end.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import serve_load  # noqa: E402

DEFAULTS = ["--prompt-len", "128", "--output-len", "64", "--max-model-len", "256", "--max-num-seqs", "128",
            "--max-num-batched-tokens", "512", "--requests-per-client", "2"]


def main(argv=None) -> int:
    p = serve_load.parser()
    p.add_argument("--ab-levels", default="1,32,128")
    args = p.parse_args(DEFAULTS + list(sys.argv[1:] if argv is None else argv))
    split_rows, args.split_rows = args.split_rows or 64, None     # the server starts without; the variant sets it
    ab = {int(x) for x in args.ab_levels.split(",")}
    t = time.perf_counter()
    llm, server, args.url, model = serve_load._start(args)
    report = {"model": model, "startup_s": time.perf_counter() - t, "levels": [], "client_procs": "varies"}
    levels_c = [int(x) for x in args.concurrency.split(",")]
    procs = serve_load.Clients(min(4, -(-max(levels_c) // 32)))
    from tilesafe.serve import BackgroundServer
    h11 = BackgroundServer(server.server.config.app, http="h11", loop="asyncio", lifespan="off")
    report["http"] = {"auto": _stack(server), "h11": _stack(h11)}
    report["graphs_warmup_s"] = _warm_graphs(server)
    rng, warm_rng = random.Random(0), random.Random(10 ** 6)
    try:
        for c in levels_c:
            n = max(8, args.requests_per_client * c)
            reqs = [(serve_load._ids(rng, serve_load._draw(rng, args.prompt_len), args.vocab),
                     serve_load._draw(rng, args.output_len)) for _ in range(n)]
            warm = [(serve_load._ids(warm_rng, len(ids), args.vocab), min(out, 16)) for ids, out in reqs[:c]]
            variants = [("auto", server.url, None, 1)]
            if c in ab:
                variants += [("h11", h11.url, None, 1), ("split", server.url, split_rows, 1)]
                if c >= 64:
                    variants += [("stream2", server.url, None, 2), ("split+s2", server.url, split_rows, 2)]
            for i, (name, url, rows, interval) in enumerate(variants):
                args.offline, args.url = i == 0, url
                _split(server, rows, interval)
                try:
                    level = serve_load._measure(args, server, llm, model, reqs, warm, c, 0, procs)
                except Exception as e:
                    level = {"concurrency": c, "error": f"{type(e).__name__}: {e}"}
                level["shared_prefix"] = name          # the table's second column names the variant
                report["levels"].append(level)
                print(json.dumps(level), flush=True)
                if args.out:
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        procs.close()
        h11.stop()
        server.stop()
    serve_load._table(report)
    print(f"http: {report['http']}; prefill graphs warm-up {report['graphs_warmup_s']} s", file=sys.stderr)
    return 0


def _stack(srv) -> str:
    """What uvicorn runs for this server: its HTTP protocol class and event loop."""
    import importlib.util
    cfg = srv.server.config
    loop = cfg.loop if cfg.loop != "auto" else ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    return f"{getattr(cfg, 'http_protocol_class', type(None)).__name__}, {loop}"


def _warm_graphs(server) -> float | None:
    """Warm every prefill graph bucket on the engine thread (what a split step replays); seconds."""
    def warm(core):
        import torch
        graphs = core.runner.graphs
        if graphs is None:
            return None
        t = time.perf_counter()
        with core.llm.on_device(), torch.inference_mode():
            graphs.warm_up()
            core.runner.forget_rows()
        torch.cuda.synchronize()
        return time.perf_counter() - t
    try:
        return server.engine.thread.call(warm, timeout=600)
    except Exception as e:
        print(f"graph warm-up failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _split(server, rows, interval) -> None:
    def set_(core):
        core.runner.split_rows = rows
        core.scheduler.max_fresh = 4 if rows is not None else 2
        core.stream_interval = interval
    server.engine.thread.call(set_)


if __name__ == "__main__":
    raise SystemExit(main())
