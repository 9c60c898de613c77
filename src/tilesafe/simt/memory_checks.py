"""S7 and S14 for a SIMT launch: the refusals every launch path words alike.

The full path (launch.py) checks them on byte sets; a launch plan (launch_plans.py, and the
GPU's lean path gpu_repeat.py) first on storage states: arguments in different memory (distinct
states) share no byte, and an output's self-overlap is fixed by its shape and strides (the plan's
key), so byte sets are compared only where an output shares its memory with another argument.
"""
from __future__ import annotations

from ..errors import AliasError, OwnershipError
from ..runtime.aliasing import overlaps, self_overlaps
from .params import WRITTEN


def check_aliasing(kernel, sets: dict) -> None:
    """S7: no output shares a byte with another argument or with itself. `sets`: name -> ByteSet of
    every tensor argument, in parameter order (the order the refusal names them in)."""
    for p in kernel.params:
        if p.kind not in WRITTEN:
            continue
        if self_overlaps(sets[p.name]):
            raise AliasError(f"output `{p.name}` of `{kernel.name}` overlaps itself (a stride-0 or overlapping "
                             "view)", help="write into a tensor whose elements are distinct")
        for other, s in sets.items():
            if other != p.name and overlaps(sets[p.name], s):
                raise AliasError(f"output `{p.name}` of `{kernel.name}` shares memory with argument `{other}`",
                                 help=f"an output's bytes must not be reachable through another argument; pass "
                                      f"a separate tensor for `{p.name}`")


def alias_pairs(kernel, names) -> tuple:
    """(output, other) positions in `names` (the tensor arguments, in parameter order) whose memory
    must differ for S7 to hold without comparing byte sets."""
    written = {p.name for p in kernel.params if p.kind in WRITTEN}
    return tuple((i, j) for i, a in enumerate(names) if a in written for j in range(len(names)) if j != i)


def share_memory(pairs: tuple, states) -> bool:
    """Whether some (output, other) pair's arguments lie in one memory (merged storage states share
    one `__dict__`, storage_state._absorb: that is the memory's identity)."""
    for i, j in pairs:
        if states[i].__dict__ is states[j].__dict__:
            return True
    return False


def refuse_unwritten(kernel, name: str) -> None:
    """S14: argument `name` is read but not every byte of it was written."""
    raise OwnershipError(f"argument `{name}` of `{kernel.name}` is read, but it came from ts.empty and has not "
                         "been written", help="write it first, or create it with ts.zeros")
