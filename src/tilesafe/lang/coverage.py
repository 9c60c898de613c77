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
        elif op.opcode == "if" and _is_arrival(fn, op):
            # S16: every group has a last block, which runs the body once.
            written.update(s.args[0].name for s in op.regions[0].ops
                           if s.opcode == "store" and s.attrs["mode"] == "group")
        elif op.opcode == "subtiles" or (op.opcode == "tiles" and not op.attrs["windowed"]):
            name = op.attrs["output"]
            if _stores_whole(op.regions[0], name, "subtile" if op.opcode == "subtiles" else "tile"):
                written.add(name)
    return written


def _is_arrival(fn: Function, op) -> bool:
    """Is this `if` the one on `ts.last_arrival()` (its condition is the `arrive` op's result)?"""
    return any(o.opcode == "arrive" and o.results[0] is op.args[0] for o in fn.body.ops)


def _stores_whole(block: Block, name: str, mode: str) -> bool:
    return any(op.opcode == "store" and op.args[0].name == name and op.attrs["mode"] == mode for op in block.ops)


def loaded_outputs(fn: Function) -> set[str]:
    """Outputs the kernel loads back anywhere (`z.load()`): the backend keeps their accesses
    on one path so the S15 barrier orders them."""
    from .ir import walk
    return {op.args[0].name for op in walk(fn.body) if op.opcode == "load" and op.args[0].type.tile is not None}


def reads_outputs(fn: Function) -> set[str]:
    """Outputs the kernel loads back (`z.load()`) before writing them: they must be
    initialised before the launch. A load that follows an unconditional top-level store of
    the block's whole tile reads what this block just wrote (S15), so it needs nothing."""
    stored: set[str] = set()
    needs: set[str] = set()
    for op in fn.body.ops:
        for sub in (op, *walk_regions(op)):
            if sub.opcode == "load" and sub.args[0].type.tile is not None and sub.args[0].name not in stored:
                needs.add(sub.args[0].name)
        if op.opcode == "store" and op.attrs["mode"] == "block":
            stored.add(op.args[0].name)
    return needs


def walk_regions(op):
    from .ir import walk
    for region in op.regions:
        yield from walk(region)
