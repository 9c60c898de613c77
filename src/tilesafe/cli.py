"""The `tilesafe` command: `tilesafe demo`, `tilesafe check FILE.py`, `tilesafe bench`, and the
Qwen3 engine's `tilesafe generate` and `tilesafe chat` (cli_engine.py).

`demo` runs the examples on the backend this machine has and shows what tilesafe refuses;
`check` imports a file without launching anything and reports every kernel's errors;
`bench` is `python -m tilesafe.bench` (its own options, see docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import sys

from .closed_pipe import exits_quietly

USAGE = """\
examples:
  tilesafe demo                 run the examples, then show errors for unsafe kernels
  tilesafe check my_kernels.py  check every @ts.kernel in a file without running it
  tilesafe check --target gfx942 my_kernels.py   ... and compile its launches for an MI300X
  tilesafe bench --quick        benchmark the kernel library on the GPU (bench --help)
  tilesafe generate Qwen/Qwen3-4B "Hello"          stream a completion (generate --help)
  tilesafe chat --random-weights tiny --device cpu  chat with a random tiny Qwen3, no download
  tilesafe serve Qwen/Qwen3-4B --port 8000         an OpenAI-compatible server (serve --help)
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tilesafe", epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Safe GPU tile kernels for Python: proven race-free and in-bounds before launch.")
    p.add_argument("--version", action="version", version=f"tilesafe {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the examples and show what tilesafe refuses",
                          description="Run each example (one line each), then show the errors of "
                                      "deliberately unsafe kernels.")
    demo.add_argument("--examples", metavar="DIR",
                      help="the examples folder (default: the ones installed with tilesafe)")
    check = sub.add_parser("check", help="check the kernels of Python files without running them",
                           description="Import each file with launching disabled and report the errors of "
                                       "every @ts.kernel it defines. Exits 1 if any kernel has an error.")
    check.add_argument("files", nargs="+", metavar="FILE.py")
    check.add_argument("--target", metavar="GPU", help="also compile each launch the file makes for this GPU, "
                       "which need not be here: sm_90, sm_100, gfx942 (MI300X), gfx950 (MI355X)")
    # Parsed by tilesafe.bench's own parser (main hands it the rest of the command line).
    sub.add_parser("bench", add_help=False, help="benchmark the kernel library against PyTorch and raw Triton")
    from . import cli_engine
    cli_engine.add_parsers(sub)
    from . import cli_serve
    cli_serve.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from .errors import TileSafeError, render
    with exits_quietly():
        try:
            return _run(argv)
        except TileSafeError as e:   # e.g. a bad TILESAFE_* setting: about the environment, not a line of code
            print(render(e.message, None, e.help), file=sys.stderr)
            return 2


def _run(argv: list[str]) -> int:
    if argv[:1] == ["bench"]:
        from .bench.cli import main as bench
        return bench(argv[1:], prog="tilesafe bench")
    args = parser().parse_args(argv)
    if args.command == "demo":
        from . import demo
        return demo.run(args.examples)
    if args.command == "check":
        from . import check_file
        return check_file.run(args.files, args.target)
    if args.command in ("generate", "chat"):
        from . import cli_engine
        return cli_engine.run(args)
    if args.command == "serve":
        from . import cli_serve
        return cli_serve.run(args)
    parser().print_help()
    return 2


def _version() -> str:
    from . import __version__
    return __version__


if __name__ == "__main__":
    sys.exit(main())
