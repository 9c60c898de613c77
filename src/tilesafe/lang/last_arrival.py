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
from . import stubs
from .annotations import MUT_TILES
from .arrival_rules import AFTER, IN, WHERE, check_final
from .builder import Builder
from .expressions import lower_expr
from .ir import Block, Op, TileType, Value
from .objects import MintedIndex, TensorArg
from .regions import counted_loop, lower_branch


def is_arrival_test(b: Builder, test: ast.expr) -> bool:
    """Is `test` a call of `ts.last_arrival`? Only a call spelled `....last_arrival(...)` or
    `last_arrival(...)` is resolved, so no other condition is lowered twice."""
    func = test.func if isinstance(test, ast.Call) else None
    if getattr(func, "attr", getattr(func, "id", None)) != "last_arrival":
        return False
    return lower_expr(b, func) is stubs.last_arrival


def lower_arrival_if(b: Builder, node: ast.If) -> None:
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
    if b.arrival != IN:
        raise b.error(call, f"`{z.name}.members()` reads the tiles of the block's group: only inside `{WHERE}`",
                      help="other blocks' tiles are final only once the whole group has arrived")
    if call.args or call.keywords:
        raise b.error(call, f"`{z.name}.members()` takes no arguments")
    check_final(b, call, z)
    if not isinstance(node.target, ast.Name):
        raise b.error(node.target, f"bind the index of `{z.name}.members()` to one name: `for s in ...`")
    iv = Value(TileType((), dt.i32), node.target.id)
    lo, step = b.const(0, dt.i32), b.const(1, dt.i32)
    hi = b.emit1("num_blocks", (), TileType((), dt.i32), {"axis": 0})
    counted_loop(b, node, lo, hi, step, iv, MintedIndex(z, "members", (iv,), None))
