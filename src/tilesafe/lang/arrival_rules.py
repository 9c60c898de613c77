"""S16's rules for what a kernel reads and writes around `if ts.last_arrival():`
(last_arrival.py lowers the `if` and the `members()` walk; memory.py's loads and stores and
the frontend's end check apply these)."""
from __future__ import annotations

from ..errors import KernelError
from .annotations import MUT, MUT_LAST
from .builder import Builder
from .coverage import written_whole
from .objects import TensorArg

IN, AFTER = "in", "after"
WHERE = "if ts.last_arrival():"


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


def check_final(b: Builder, node, z: TensorArg) -> None:
    """`z`'s member tiles are final: a `ts.Mut` that every block stored whole, on every path,
    before taking its ticket."""
    if z.kind != MUT:
        raise b.error(node, f"a group's member tiles are those of a ts.Mut output; `{z.name}` is {z.kind_name}")
    if z.value.name not in written_whole(b.root):
        raise b.error(node, f"the group's last block reads `{z.name}`, so every block must first store its whole "
                            f"tile of `{z.name}`, on every path",
                      help=f"store it before `{WHERE}` whatever the branches and loops do: {z.name}.store(tile) "
                           "at the top level, or on both branches of an if")


def check_finished(b: Builder, params) -> None:
    """After the body: a kernel with `MutLast` outputs has its `if ts.last_arrival():`."""
    if b.arrival is None:
        for p in params:
            if p.kind == MUT_LAST:
                raise KernelError(f"`{p.name}` is a ts.MutLast output, but the kernel has no `{WHERE}`", p.loc,
                                  help=f"store `{p.name}` in the body of `{WHERE}` at the end of the kernel")
