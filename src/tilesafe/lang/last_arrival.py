"""S16: `if ts.last_arrival():`, where the last block of a group combines the group's tiles.

A group is the blocks that share every grid index but axis 0; axis 0 numbers its members.
Each member stores its `ts.Mut` tiles and takes a ticket; the block that takes the group's
last ticket runs the `if` body. There it reads every member's tiles
(`for s in part.members(): part.load(s)`) and writes the group's `ts.MutLast` tiles.

The frontend checks what makes that race-free and fully initialised:
  * the `if` is the kernel's last statement, at the top level of its body, without `else`,
    and there is at most one;
  * a `ts.Mut` output read in the body was stored whole on every path before the `if` (its
    block tile at the top level, on both branches of an `if`, in a loop that surely runs, by
    a sub-tile walk: the written-output analysis of coverage.py), and no `ts.Mut` output is
    stored inside it, so every member's tile is final when its ticket is taken;
  * `ts.MutLast` outputs are stored only inside the body, and `members()` walks only there.
"""
from __future__ import annotations

import ast

from .. import dtypes as dt
from ..errors import KernelError
from .annotations import MUT, MUT_LAST, MUT_TILES
from .builder import Builder
from .coverage import written_whole
from .ir import Block, Op, TileType, Value
from .objects import MintedIndex, TensorArg

IN, AFTER = "in", "after"
WHERE = "if ts.last_arrival():"


def is_arrival_test(b: Builder, test: ast.expr) -> bool:
    """Is `test` a call of `ts.last_arrival`? Only a call spelled `....last_arrival(...)` or
    `last_arrival(...)` is resolved, so no other condition is lowered twice."""
    func = test.func if isinstance(test, ast.Call) else None
    if getattr(func, "attr", getattr(func, "id", None)) != "last_arrival":
        return False
    from . import stubs
    from .expressions import lower_expr
    return lower_expr(b, func) is stubs.last_arrival


def lower_arrival_if(b: Builder, node: ast.If) -> None:
    from .statements import lower_branch
    test = node.test
    if test.args or test.keywords:
        raise b.error(test, "ts.last_arrival() takes no arguments",
                      help="the group is every block with the same grid indices but axis 0")
    if b.arrival is not None:
        raise b.error(test, "a kernel has at most one `if ts.last_arrival():`",
                      help="combine everything the group's last block does in one if")
    if b.block is not b.root or b.inline_depth:
        raise b.error(test, "ts.last_arrival() must be the condition of an `if` at the top level of the kernel body",
                      help="every block of a group must take its ticket: not in a loop, branch or @ts.function")
    if node is not b.src.tree.body[-1]:
        raise b.error(test, "`if ts.last_arrival():` must be the kernel's last statement",
                      help="the blocks that are not last finish at the if; move the statements after it "
                           "before it, or into it")
    if node.orelse:
        raise b.error(node.orelse[0], "`if ts.last_arrival():` takes no else branch",
                      help="the other blocks of the group have nothing left to do; put their work before the if")
    persistent = [v for v in b.env.values() if isinstance(v, TensorArg) and v.kind == MUT_TILES]
    if persistent:
        raise b.error(test, f"ts.last_arrival() groups the blocks of a grid; `{persistent[0].name}` is a "
                            "ts.MutTiles output of a persistent kernel",
                      help="use ts.Mut outputs, one tile per block, with the group's members along grid axis 0")
    flag = b.emit1("arrive", (), TileType((), dt.bool_))
    b.arrival = IN
    try:
        _, body = lower_branch(b, node.body)
    finally:
        b.arrival = AFTER
    body.ops.append(Op("yield", (), (), {}, (), b.loc))
    b.emit("if", (flag,), (), {}, (body, Block([], [Op("yield", (), (), {}, (), b.loc)])))


def lower_members(b: Builder, node: ast.For, z: TensorArg, call: ast.Call) -> None:
    """`for s in part.members():` the index of each member's tile of `part`, in the body."""
    from .statements import counted_loop
    if b.arrival != IN:
        raise b.error(call, f"`{z.name}.members()` reads the tiles of the block's group: only inside `{WHERE}`",
                      help="other blocks' tiles are final only once the whole group has arrived")
    if call.args or call.keywords:
        raise b.error(call, f"`{z.name}.members()` takes no arguments")
    _check_final(b, call, z)
    if not isinstance(node.target, ast.Name):
        raise b.error(node.target, f"bind the index of `{z.name}.members()` to one name: `for s in ...`")
    iv = Value(TileType((), dt.i32), node.target.id)
    lo, step = b.const(0, dt.i32), b.const(1, dt.i32)
    hi = b.emit1("num_blocks", (), TileType((), dt.i32), {"axis": 0})
    counted_loop(b, node, lo, hi, step, iv, MintedIndex(z, "members", (iv,), None))


def check_store(b: Builder, node, z: TensorArg, idx) -> None:
    """S16 for stores: `MutLast` only inside the body, `Mut` never there."""
    if z.kind == MUT_LAST:
        if b.arrival != IN:
            raise b.error(node, f"`{z.name}` is a ts.MutLast output: store it inside `{WHERE}`",
                          help="its tile belongs to the whole group, and only the group's last block writes it")
        if idx is not None:
            raise b.error(node, f"`{z.name}` is a ts.MutLast output: store the group's whole tile, "
                                f"`{z.name}.store(tile)`")
    elif z.kind == MUT and b.arrival == IN:
        raise b.error(node, f"cannot store to the ts.Mut output `{z.name}` inside `{WHERE}`",
                      help="store every block's tile before the if; the group's result goes to a ts.MutLast output")


def misplaced(b: Builder, node, *args, **kwargs):
    """`ts.last_arrival()` anywhere but as the condition of the kernel's last `if`."""
    raise b.error(node, f"ts.last_arrival() is only the condition of an if: `{WHERE}`, the kernel's last statement",
                  help="the call takes the block's ticket; its result has no other use")


def _check_final(b: Builder, node, z: TensorArg) -> None:
    """`z`'s member tiles are final: a `ts.Mut` that every block stored whole, on every path,
    before taking its ticket."""
    if z.kind != MUT:
        raise b.error(node, f"a group's member tiles are those of a ts.Mut output; `{z.name}` is {z.kind_name}")
    if z.value.name not in written_whole(b.root):
        raise b.error(node, f"the group's last block reads `{z.name}`, so every block must first store its whole "
                            f"tile of `{z.name}`, on every path",
                      help=f"store it before `{WHERE}` whatever the branches and loops do: {z.name}.store(tile) "
                           "at the top level, or on both branches of an if")


def member_load(b: Builder, node, z: TensorArg, idx: MintedIndex, padding):
    """`z.load(s)`: member s's tile of `z`. The ts.Mut outputs share the grid, so an index
    minted by one output's `members()` walk names a member of every one of them."""
    from .memory import emit_load
    _check_final(b, node, z)
    return emit_load(b, node, z, idx.values, z.tile, padding, "member", owner=z)


def check_finished(b: Builder, params) -> None:
    """After the body: a kernel with `MutLast` outputs has its `if ts.last_arrival():`."""
    if b.arrival is None:
        for p in params:
            if p.kind == MUT_LAST:
                raise KernelError(f"`{p.name}` is a ts.MutLast output, but the kernel has no `{WHERE}`", p.loc,
                                  help=f"store `{p.name}` in the body of `{WHERE}` at the end of the kernel")
