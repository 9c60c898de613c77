"""Where the server loses against the offline engine: one in-process server, each level run
with its load generator in other processes or on the server's own event loop, and under two
GIL switch intervals (GPU).

    PYTHONPATH=src:/tmp/site python benchmarks/probes/serve_ab.py --random-weights 4b --concurrency 1,8,32,128

serve_load's levels (`serve_load.py --help` takes the same flags; defaults here: prompt 128,
output 64, 128 sequences, 512 tokens a step, 2 requests per client) with --offline once per
level, then the server again per variant: `procs` (clients in worker processes, the GIL's
default 5 ms switch interval), `procs-si1ms` (1 ms), `inproc` (clients on the server
process's loop, as serve_load ran before). Variants run only at the levels listed in
--ab-levels (default 32,128). Prints serve_load's table (one row per variant) at the end.
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
    p.add_argument("--ab-levels", default="32,128")
    args = p.parse_args(DEFAULTS + list(sys.argv[1:] if argv is None else argv))
    ab = {int(x) for x in args.ab_levels.split(",")}
    t = time.perf_counter()
    llm, server, args.url, model = serve_load._start(args)
    report = {"model": model, "startup_s": time.perf_counter() - t, "levels": [], "client_procs": "varies"}
    levels_c = [int(x) for x in args.concurrency.split(",")]
    procs = serve_load.Clients(min(4, -(-max(levels_c) // 32)))
    inproc = serve_load.Clients(0, in_process=True)
    rng, warm_rng = random.Random(0), random.Random(10 ** 6)
    try:
        for c in levels_c:
            n = max(8, args.requests_per_client * c)
            reqs = [(serve_load._ids(rng, serve_load._draw(rng, args.prompt_len), args.vocab),
                     serve_load._draw(rng, args.output_len)) for _ in range(n)]
            warm = [(serve_load._ids(warm_rng, len(ids), args.vocab), min(out, 16)) for ids, out in reqs[:c]]
            variants = [("procs", procs, 0.005)]
            if c in ab:
                variants += [("procs-si1ms", procs, 0.001), ("inproc", inproc, 0.005)]
            for i, (name, clients, si) in enumerate(variants):
                args.offline = i == 0
                sys.setswitchinterval(si)
                try:
                    level = serve_load._measure(args, server, llm, model, reqs, warm, c, 0, clients)
                except Exception as e:
                    level = {"concurrency": c, "error": f"{type(e).__name__}: {e}"}
                level["shared_prefix"] = name          # the table's second column names the variant
                report["levels"].append(level)
                print(json.dumps(level), flush=True)
                if args.out:
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        sys.setswitchinterval(0.005)
        procs.close()
        server.stop()
    serve_load._table(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
