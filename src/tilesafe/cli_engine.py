"""`tilesafe generate` and `tilesafe chat`: the Qwen3 engine from the command line.

    tilesafe generate MODEL "prompt"        stream a completion, then the speed on stderr
    tilesafe chat MODEL                     a conversation (the chat template), one line per turn
    tilesafe generate --random-weights tiny "prompt"     no download: a random Qwen3 of that shape

MODEL is a checkpoint folder or a Hugging Face hub id. With --random-weights, MODEL is
optional: without it the random weights are made directly on the device (`LLM.from_random`,
no disk: a 32B checkpoint would not fit); given, it is the folder to write the random
checkpoint to once (config.json, safetensors, Qwen3's tokenizer) and load from, reused after.
Ctrl-C stops cleanly: `generate` exits with status 130, `chat` ends the reply and goes back
to the prompt (Ctrl-C or Ctrl-D there ends the conversation).
"""
from __future__ import annotations

import argparse
import sys
import time

SIZES = ("0.6b", "1.7b", "4b", "8b", "14b", "32b", "tiny")   # random_checkpoint.SIZES, without importing torch
INTERRUPTED = 130


def add_parsers(sub) -> None:
    gen = sub.add_parser("generate", help="generate text with a Qwen3 checkpoint (streamed)",
                         usage="tilesafe generate [options] MODEL PROMPT\n"
                               "       tilesafe generate [options] --random-weights SIZE [MODEL] PROMPT",
                         description="Stream the completion of PROMPT, then print tokens/s on stderr.")
    gen.add_argument("args", nargs="+", metavar="[MODEL] PROMPT",
                     help="a checkpoint folder or hub id, then the prompt (MODEL optional with --random-weights)")
    gen.add_argument("--chat", action="store_true", help="wrap PROMPT in the chat template as a user turn")
    chat = sub.add_parser("chat", help="chat with a Qwen3 checkpoint",
                          usage="tilesafe chat [options] MODEL\n"
                                "       tilesafe chat [options] --random-weights SIZE [MODEL]",
                          description="A conversation through the model's chat template: type a message, read "
                                      "the reply. /reset forgets the conversation, /exit (or Ctrl-D) ends it.")
    chat.add_argument("args", nargs="*", metavar="MODEL", help="a checkpoint folder or hub id "
                                                               "(optional with --random-weights)")
    chat.add_argument("--system", metavar="TEXT", help="a system message that opens the conversation")
    for p in (gen, chat):
        _common_flags(p)


def _common_flags(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("sampling (unset: the checkpoint's generation_config.json, then vLLM's defaults)")
    s.add_argument("--temperature", type=float, help="0 for greedy")
    s.add_argument("--top-p", type=float)
    s.add_argument("--top-k", type=int)
    s.add_argument("--max-tokens", type=int, default=256, help="tokens to generate at most (default 256)")
    s.add_argument("--seed", type=int, help="sampling seed (reproducible output)")
    s.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")
    s.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop before this text (repeat for several)")
    s.add_argument("--no-thinking", action="store_true", help="chat template: enable_thinking=False (Qwen3)")
    m = p.add_argument_group("model")
    model_flags(m, max_len_help="prompt + generated tokens at most")
    m.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor parallelism over N GPUs (or N CPU processes): one process per rank (default 1)")


def model_flags(p, *, max_len_help: str) -> None:
    """The model options `generate`, `chat` and `serve` share (p: a parser or an argument group)."""
    p.add_argument("--random-weights", choices=SIZES, metavar="SIZE",
                   help=f"a random Qwen3 of a real shape: {', '.join(SIZES)}")
    p.add_argument("--weights-seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--device", help="cpu or cuda[:N] (default: cuda when there is one)")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"),
                   help="weights and activations (default: float32 on cpu, the checkpoint's on cuda)")
    p.add_argument("--max-model-len", type=int, help=max_len_help)


def run(args: argparse.Namespace) -> int:
    model, rest = _model_and_rest(args)     # model None: random weights made on the device
    _params(args)                           # bad sampling flags are refused before the model loads
    llm = None
    try:
        llm = _load(model, args)
        if args.command == "generate":
            _generate(llm, rest[0], args)
            return 0
        return _chat(llm, args)
    except KeyboardInterrupt:               # while loading or streaming: no traceback
        print("\n[interrupted]", file=sys.stderr)
        return INTERRUPTED
    finally:
        if llm is not None and args.tp > 1:
            llm.close()                     # the other ranks exit, the process group ends


def _model_and_rest(args) -> tuple[str | None, list[str]]:
    """Split the positionals into MODEL and the rest; MODEL may be left out under --random-weights."""
    from .engine.text_errors import input_error
    wanted = 1 if args.command == "generate" else 0
    given = list(args.args)
    if len(given) == wanted + 1:
        return given[0], given[1:]
    if len(given) == wanted and args.random_weights:
        return None, given
    usage = 'tilesafe generate MODEL "prompt"' if wanted else "tilesafe chat MODEL"
    raise input_error(f"{args.command}: expected {'MODEL and PROMPT' if wanted else 'MODEL'}, got "
                      f"{len(given)} argument{'s' * (len(given) != 1)}",
                      f"{usage} (MODEL may be left out with --random-weights SIZE)")


def _load(model: str | None, args):
    return load_llm(model, args, max_num_seqs=1, tensor_parallel_size=args.tp)


def load_llm(model: str | None, args, **settings):
    """The LLM the model flags (`model_flags`) name: random weights made on the device when
    `model` is None, a random checkpoint written to `model` first when it is not there yet."""
    from .engine import LLM
    settings.update(device=args.device, dtype=args.dtype, max_model_len=args.max_model_len)
    if args.random_weights and model is None:
        return LLM.from_random(args.random_weights, seed=args.weights_seed, **settings)
    if args.random_weights:
        from .engine.random_checkpoint import is_random_checkpoint, write_checkpoint
        if not is_random_checkpoint(model, args.random_weights, args.weights_seed, "bfloat16"):
            print(f"writing a random Qwen3-{args.random_weights} to {model}", file=sys.stderr)
            write_checkpoint(model, args.random_weights, args.weights_seed, "bfloat16", progress=True)
    return LLM(model, **settings)


def _params(args):
    from .engine import SamplingParams
    return SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          max_tokens=args.max_tokens, seed=args.seed, ignore_eos=args.ignore_eos, stop=args.stop)


def _chat_tokenizer(llm, what: str):
    """The model's tokenizer for the chat template; a model without one is refused (it was an
    AttributeError on None)."""
    from .engine.text_errors import input_error
    tokenizer = llm.get_tokenizer()
    if tokenizer is None:
        raise input_error(f"{what}: the model has no tokenizer (no tokenizer.json in its folder), so no chat template",
                          "use a checkpoint folder with its tokenizer files, or generate without --chat")
    return tokenizer


def _generate(llm, prompt: str, args) -> None:
    params = _params(args)
    if args.chat:
        ids = _chat_tokenizer(llm, "generate --chat").apply_chat_template(
            [{"role": "user", "content": prompt}], enable_thinking=False if args.no_thinking else None)
        prompt = {"prompt_token_ids": ids}
    _stream(llm, prompt, params)


def _stream(llm, prompt, params) -> str:
    """Print the reply as it comes, then its speed on stderr; return its text."""
    start = time.perf_counter()
    first = end = None
    tokens, pieces = 0, []
    for delta in llm.stream(prompt, params):
        end = time.perf_counter()
        first = first or end
        tokens += len(delta.token_ids)
        pieces.append(delta.text)
        print(delta.text, end="", flush=True)
    print(flush=True)
    print(_speed(tokens, start, first, end), file=sys.stderr, flush=True)
    return "".join(pieces)


def _speed(tokens: int, start: float, first: float | None, end: float | None) -> str:
    if not tokens:
        return "[0 tokens]"
    line = f"[{tokens} tokens in {end - start:.2f} s: first token after {first - start:.2f} s"
    if tokens > 1 and end > first:
        line += f", then {(tokens - 1) / (end - first):.3g} tokens/s"
    return line + "]"


def _chat(llm, args) -> int:
    from .errors import TileSafeError, render
    tokenizer, params = _chat_tokenizer(llm, "chat"), _params(args)
    opening = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(opening)
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = input("> " if interactive else "")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        if line.strip() in ("/exit", "/quit"):
            return 0
        if line.strip() == "/reset":
            messages = list(opening)
            continue
        if not line.strip():
            continue
        messages.append({"role": "user", "content": line})
        try:
            ids = tokenizer.apply_chat_template(messages, enable_thinking=False if args.no_thinking else None)
            reply = _stream(llm, {"prompt_token_ids": ids}, params)
        except KeyboardInterrupt:
            print("\n[interrupted]", file=sys.stderr)
            messages.pop()
            continue
        except TileSafeError as e:         # e.g. the conversation outgrew max_model_len: say so, keep chatting
            print(render(e.message, None, e.help), file=sys.stderr)
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": reply})
