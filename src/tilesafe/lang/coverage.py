"""Which outputs a kernel writes completely, and which it reads before writing them (S14).

One forward "must" analysis over the structured IR. The facts at a point are the writes
that every path reaching it has made:
  (WHOLE, z)              z is written whole: this block's tile of a `ts.Mut` output; every
                          tile of a `ts.MutTiles` output (after its walk); the group's tile of
                          a `ts.MutLast` output (after `if ts.last_arrival():`);
  (AT, z, mode, idx, sub) the tile (or sub-tile) of z at the minted index idx was written in
                          the current iteration of the walk that minted idx.
Rules:
  * a store adds its fact;
  * after an `if`, the facts of both branches hold; the `if ts.last_arrival():` body runs in
    one block of every group, so its `ts.MutLast` stores count for the whole launch;
  * after a loop that surely runs (a `range` with compile-time bounds that is not empty, a
    `subtiles` walk), its body's facts hold; a dynamic `range` or a `while` may run zero
    times, and a `tiles` walk may give a block no tile, so their bodies add nothing;
  * a walk whose body always ends with its own index stored writes the output whole (a
    `subtiles` walk: this block's tile; an unwindowed `tiles` walk: every tile);
  * a loop body is analysed with the facts before the loop: facts only grow, so those are
    exactly the facts that hold at the head of every iteration.
A load of an output reads only what this block wrote when its elements are covered by a
fact (the S15 barrier makes the store visible); any other load needs the output to be
initialised before the launch.
"""
from __future__ import annotations

from .annotations import MUT_LAST
from .ir import Block, Function, Op, Value, walk

WHOLE, AT = "whole", "at"


def definitely_written(fn: Function) -> set[str]:
    """Outputs every launch of `fn` writes completely (so they count as initialised after it)."""
    facts = _Flow(fn).block(fn.body, frozenset())
    return {f[1] for f in facts if f[0] == WHOLE}


def written_whole(block: Block) -> set[str]:
    """Outputs every path through `block` writes whole. While the kernel is being built, for
    the ops before `if ts.last_arrival():` (which holds no arrival `if` itself)."""
    facts = _Flow(None, block).block(block, frozenset())
    return {f[1] for f in facts if f[0] == WHOLE}


def reads_outputs(fn: Function) -> set[str]:
    """Outputs the kernel loads back (`z.load()`, `z.load(idx)`) where the block may not have
    written the loaded elements first: they must be initialised before the launch."""
    flow = _Flow(fn)
    flow.block(fn.body, frozenset())
    return flow.unwritten_reads


def loaded_outputs(fn: Function) -> set[str]:
    """Outputs the kernel loads back anywhere (`z.load()`): the backend keeps their accesses
    on one path so the S15 barrier orders them."""
    return {op.args[0].name for op in walk(fn.body) if op.opcode == "load" and op.args[0].type.tile is not None}


class _Flow:
    def __init__(self, fn: Function | None, body: Block | None = None):
        self.fn = fn                  # None for a body without the arrival `if` (written_whole)
        body = fn.body if body is None else body
        self.defs = {r: op for op in walk(body) for r in op.results}   # value -> the op defining it
        self.unwritten_reads: set[str] = set()

    def block(self, block: Block, facts: frozenset) -> frozenset:
        for op in block.ops:
            facts = self.op(op, facts)
        return facts

    def op(self, op: Op, facts: frozenset) -> frozenset:
        code = op.opcode
        if code == "load" and op.args[0].type.tile is not None:
            self._load(op, facts)
        elif code == "store":
            return facts | {_stored(op)}
        elif code == "if":
            then = self.block(op.regions[0], facts)
            if self._is_arrival(op.args[0]):
                return facts | {f for f in then if f[0] == WHOLE and self.fn.param(f[1]).kind == MUT_LAST}
            return then & self.block(op.regions[1], facts)
        elif code == "for":
            body = self.block(op.regions[0], facts)
            return body if self._surely_runs(op) else facts
        elif code == "subtiles":   # visits every sub-tile of the block's tile: at least one
            body = self.block(op.regions[0], facts)
            return body | _covered(op, body, "subtile", op.attrs["shape"])
        elif code == "tiles":
            body = self.block(op.regions[0], facts)
            return facts if op.attrs["windowed"] else facts | _covered(op, body, "tile", None)
        else:
            for region in op.regions:   # a `while` (and anything else with regions) may not run
                self.block(region, facts)
        return facts

    def _load(self, op: Op, facts: frozenset) -> None:
        name, mode = op.args[0].name, op.attrs["mode"]
        written = mode in ("block", "member", "subtile") and (WHOLE, name) in facts
        if mode in ("subtile", "tile"):
            written = written or (AT, name, mode, tuple(op.args[1:]), op.attrs.get("sub")) in facts
        if not written:
            self.unwritten_reads.add(name)

    def _is_arrival(self, cond: Value) -> bool:
        """Is this the `if` on `ts.last_arrival()` (its condition is the `arrive` op's result)?"""
        op = self.defs.get(cond)
        return op is not None and op.opcode == "arrive"

    def _surely_runs(self, op: Op) -> bool:
        """A `for` over a range whose bounds are compile-time and that has an iteration."""
        bounds = [self.defs.get(v) for v in op.args[:3]]
        if any(d is None or d.opcode != "const" for d in bounds):
            return False
        lo, hi, step = (d.attrs["value"] for d in bounds)
        return len(range(lo, hi, step)) > 0


def _stored(op: Op) -> tuple:
    name, mode = op.args[0].name, op.attrs["mode"]
    if mode in ("block", "group"):
        return (WHOLE, name)
    return (AT, name, mode, tuple(op.args[2:]), op.attrs.get("sub"))


def _covered(walk_op: Op, body: frozenset, mode: str, sub) -> frozenset:
    """{(WHOLE, z)} when the walk's body ends with the walk's own index of z stored."""
    name = walk_op.attrs["output"]
    rank = len(walk_op.attrs["shape"]) if mode == "subtile" else walk_op.attrs["rank"]
    idx = tuple(walk_op.regions[0].args[:rank])
    return frozenset({(WHOLE, name)}) if (AT, name, mode, idx, sub) in body else frozenset()
