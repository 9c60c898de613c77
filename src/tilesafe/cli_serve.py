"""`tilesafe serve`: the OpenAI-compatible server over the Qwen3 engine.

    tilesafe serve MODEL --host 127.0.0.1 --port 8000
    tilesafe serve --random-weights 0.6b            no download: random weights made on the device

MODEL is a checkpoint folder or a Hugging Face hub id (optional with --random-weights, as for
`tilesafe generate`). Requests are served with continuous batching (up to --max-num-seqs at
once, KV capacity --kv-blocks of --block-size tokens); Ctrl-C shuts down gracefully: running
requests end with finish_reason "abort" after a few seconds' grace.
"""
from __future__ import annotations

import argparse
import sys

from .cli_engine import load_llm, model_flags


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (continuous batching)",
                       description="Serve /v1/completions, /v1/chat/completions, /v1/models, /health and "
                                   "/metrics for one Qwen3 model.")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a checkpoint folder or hub id (optional with --random-weights)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--served-model-name", metavar="NAME", help="the model id clients send (default: MODEL's "
                   "folder name, or qwen3-SIZE-random)")
    model_flags(p, max_len_help="prompt + generated tokens per request at most")
    p.add_argument("--max-num-seqs", type=int, default=16, help="requests decoded together (default 16)")
    p.add_argument("--kv-blocks", type=int, help="KV capacity in blocks (default: max-num-seqs full-length "
                   "sequences); fewer makes the scheduler preempt")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    p.add_argument("--max-num-batched-tokens", type=int, metavar="N", help="tokens one step computes, decodes and "
                   "prefill chunks together (default 2048): longer prompts are prefilled in chunks")
    p.add_argument("--no-prefix-caching", action="store_true", help="do not share the KV blocks of identical "
                   "prompt prefixes between requests")
    p.add_argument("--decode-step-tokens", type=_step_tokens, default="itl", metavar="auto|itl|off|N",
                   help="rows of a step that carries decode rows: its decodes plus prompt tokens (up to 3x "
                        "max-num-seqs), run as one captured decode step, so a new prompt delays the running "
                        "requests' next token by one bounded step (auto: for each bucket of decode rows, the most "
                        "rows whose step, timed at start-up, takes <= 2x that bucket's step; itl: the rows whose timed "
                        "step keeps the decodes within twice the batch-1 step, while they keep up with the "
                        "waiting prompts, else whole prompts as when off (the default; without captured steps to "
                        "time, off); off: prompts beside decodes go whole, in mixed steps)")
    p.add_argument("--stream-interval", type=int, default=1, metavar="N",
                   help="while 64 or more requests run, send each one's tokens every N steps (default 1: every "
                        "step); fewer, larger stream chunks leave the engine more of the host")
    p.add_argument("--split-rows", type=int, metavar="N",
                   help="run a step of fresh prompts split (a prefill graph per prompt, captured at start-up) "
                        "when it has no decode rows or at least N (default: mixed steps wherever they fit)")


def _step_tokens(text: str):
    """--decode-step-tokens: auto, itl, off (None) or a positive row count."""
    if text in ("auto", "itl", "off"):
        return None if text == "off" else text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected auto, itl, off or a positive number of rows, got {text!r}")
    return n


def engine_options(args: argparse.Namespace) -> dict:
    """AsyncLLM's keyword arguments from the command line (the model and metrics aside)."""
    return dict(kv_blocks=args.kv_blocks, block_size=args.block_size,
                max_num_batched_tokens=args.max_num_batched_tokens, prefix_caching=not args.no_prefix_caching,
                decode_step_tokens=args.decode_step_tokens, stream_interval=args.stream_interval,
                split_rows=args.split_rows)


def run(args: argparse.Namespace) -> int:
    from .engine.text_errors import input_error
    if args.model is None and not args.random_weights:
        raise input_error("serve: expected MODEL", "tilesafe serve MODEL (MODEL may be left out with "
                                                   "--random-weights SIZE)")
    try:
        import uvicorn
        from .serve import AsyncLLM, ServerMetrics, build_app
    except ImportError as e:
        raise input_error(f"serve: {e.name} is not installed",
                          "pip install 'tilesafe[serve]' (fastapi, uvicorn, prometheus-client)") from None
    llm = load_llm(args.model, args, max_num_seqs=args.max_num_seqs)
    name = args.served_model_name or (f"qwen3-{args.random_weights}-random" if args.model is None
                                      else args.model.rstrip("/").split("/")[-1])
    metrics = ServerMetrics(name)
    engine = AsyncLLM(llm, metrics=metrics, **engine_options(args))
    print(f"serving {name} on http://{args.host}:{args.port}/v1", file=sys.stderr)
    uvicorn.run(build_app(engine, name, metrics), host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=5)
    return 0
