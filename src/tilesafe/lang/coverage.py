"""Which outputs a kernel is certain to write completely (for S14 initialisation tracking).

An output counts as written only when a store that covers its tile runs unconditionally:
at the top level of the body, or at the top level of its own `subtiles` / unwindowed
`tiles` walk. Stores under a dynamic `if`, `while` or `for` may not run, so a launch with
only those leaves an uninitialised output uninitialised.
"""
from __future__ import annotations

from .ir import Block, Function


def definitely_written(fn: Function) -> set[str]:
    written = set()
    for op in fn.body.ops:
        if op.opcode == "store" and op.attrs["mode"] == "block":
            written.add(op.args[0].name)
        elif op.opcode == "subtiles" or (op.opcode == "tiles" and not op.attrs["windowed"]):
            name = op.attrs["output"]
            if _stores_whole(op.regions[0], name, "subtile" if op.opcode == "subtiles" else "tile"):
                written.add(name)
    return written


def _stores_whole(block: Block, name: str, mode: str) -> bool:
    return any(op.opcode == "store" and op.args[0].name == name and op.attrs["mode"] == mode for op in block.ops)


def reads_outputs(fn: Function) -> set[str]:
    """Outputs the kernel loads back (`z.load()`): they must be initialised before the launch."""
    from .ir import walk
    return {op.args[0].name for op in walk(fn.body) if op.opcode == "load" and op.args[0].type.tile is not None}
