"""PlannedLaunch.run's GPU form, written out for one layout.

A planned launch (planned_launch.py) does the same per-argument steps on every launch: read
its root, check lending (S8) and frozen writes (S18), its address and, when the place moved,
its alignment class and byte set; then S14's reads, the argument tuple with the call's
addresses, and the shared tail (pending_start). Its layout fixes how many arguments there are,
which root each one views at which offset, which of them are written or read, and where each
address goes in Triton's argument tuple. A loop over those facts spent most of its time on
the loop itself (indexing per-slot tuples, list appends, copying the value template and
filling it): the same steps written out once per layout, with the facts as constants, run
about a third of the bytecodes. The checks and their order are those of the loop; what it
returns (False with nothing done, or True once started) too.
"""
from __future__ import annotations

import functools

import torch

from ..backends.triton.tma import Address, LayoutDescriptor
from . import storage_state
from .future import Completion, Future
from .pending_start import start_pending_source

_new_tuple = tuple.__new__
# The names the shared tail's lines use (pending_start.start_pending_source).
_TAIL = {"torch": torch, "Completion": Completion, **storage_state.record_launch_names()}


def unrolled(pl, lent):
    """`run(self, roots) -> bool` for the PlannedLaunch `pl` once its GPU form is prepared
    (`pl.values`, `pl.pointers`, `pl.descriptors`, `pl.aligns` set); `lent(state)`: S8's test
    of a state with lendings (planned_launch._lent)."""
    n = len(pl.slots)
    ns = {"__name__": __name__,   # tilesafe's code: error locations skip its frames (errors.caller_loc)
          "_lent": lent, "_new_tuple": _new_tuple, "LayoutDescriptor": LayoutDescriptor, "Address": Address,
          **_TAIL,
          "partial": functools.partial, "SETS": pl.sets.sets, "MAKE": pl.sets.make, "PLACES": pl.places,
          "DEVICE": pl.device_index}
    src = ["def run(self, roots):", "    places = PLACES"]
    same = _same_reads(pl)
    for k, r in enumerate(pl.slots):
        if k in same:             # the view of an earlier argument: its checks, address and byte set
            j = same[k]
            src += [f"    a{k}, s{k}, p{k} = a{j}, s{j}, p{j}"]
            continue
        frozen = f" or s{k}.frozen" if pl.writes[k] else ""
        off = pl.offsets[k]
        src += [f"    a{k} = roots[{r}]",
                f"    s{k} = a{k}[1]",
                f"    if s{k}._lent and _lent(s{k}){frozen}:",
                "        return False",
                f"    p{k} = a{k}[2]" + (f" + {int(off)}" if off else ""),
                f"    if a{k}[2:] != places[{k}]:",
                f"        if p{k} & 15 != {int(pl.aligns[k])}:",
                "            return False",
                f"        MAKE({k}, a{k}[0], a{k}[3], a{k}[4], p{k} - a{k}[3])",
                f"        places[{k}] = a{k}[2:]"]
    for k in pl.reads:          # S14 (a masked state only: none means all written)
        if k in same:
            continue
        src += [f"    if s{k}.init_mask is not None and not s{k}.is_written(self._view({k}, roots)):",
                "        return False"]
    values = [f"V{i}" for i in range(len(pl.values))]
    for i, v in enumerate(pl.values):
        ns[f"V{i}"] = v
    for i, k in pl.pointers:
        values[i] = f"p{k}"
    for j, (i, k, shape, strides, box) in enumerate(pl.descriptors):   # the layout's descriptor at this address
        ns[f"D{j}s"], ns[f"D{j}t"], ns[f"D{j}b"] = shape, strides, box
        values[i] = f"_new_tuple(LayoutDescriptor, (Address(p{k}), D{j}s, D{j}t, D{j}b, 'zero'))"
    states = ", ".join(f"s{k}" for k in range(n))
    src.append(f"    states = [{states}]")
    if pl.written:              # S14 (masked states only)
        test = " or ".join(f"s{k}.init_mask is not None" for k in pl.written)
        src.append(f"    mark = partial(self._marks, states, roots) if {test} else None")
    else:
        src.append("    mark = None")
    views = "".join(f"a{k}[0], " for k in range(n))
    args = "".join(f"{v}, " for v in values)
    # Ordering and registration once per distinct read: a second entry for the same bytes, kind
    # and stream would take the first one's place (record_launch), and its ordering is the first's.
    own = [k for k in range(n) if k not in same]
    tail = start_pending_source([f"s{k}" for k in own], [f"SETS[{k}]" for k in own], tuple(pl.writes[k] for k in own),
                                f"({args})", f"({views})", "mark", "self.streams", "DEVICE")
    src += ["    " + line for line in tail]
    src += ["    self.kernel.last_launch = self.launched",
            "    return True"]
    exec(compile("\n".join(src), f"<planned launch of {pl.kernel.name}>", "exec"), ns)   # noqa: S102 (our own text)
    return ns["run"]


def _same_reads(pl) -> dict:
    """Arguments read over the very bytes of an earlier read argument (the same root, offset
    and alignment class, and the same bytes: one dense run of equal length, or the same shape
    and strides; the same S14 role): argument -> that earlier one. A kernel's unused operand
    passed the input (a GEMV's bias as x's row, a fused GEMV's `up`), say. Their checks,
    ordering and registration are the earlier one's, so the written-out launch does them once
    (a registry entry of the same bytes, kind and completion adds no conflict)."""
    first, same = {}, {}
    for k in range(len(pl.slots)):
        if pl.writes[k]:
            continue
        dense = _dense_bytes(pl.shapes[k], pl.byte_strides[k], pl.items[k])
        where = ("dense", dense) if dense else (pl.shapes[k], pl.byte_strides[k], pl.items[k])
        key = (pl.slots[k], pl.offsets[k], pl.aligns[k], k in pl.reads, where)
        if key in first:
            same[k] = first[key]
        else:
            first[key] = k
    return same


def _dense_bytes(shape, byte_strides, item) -> int | None:
    """The bytes of a view that is one dense run (row-major, axes of one element aside), else
    None (an empty view too)."""
    expected = item
    for n, stride in zip(reversed(shape), reversed(byte_strides)):
        if n == 0:
            return None
        if n != 1:
            if stride != expected:
                return None
            expected *= n
    return expected


def layout_direct(launcher):
    """`direct(self, t0.., g0.., p0..) -> Future` for the LayoutLauncher `launcher`
    (prepared_launch.LayoutLauncher.direct, written out for its layout: each argument's byte
    set kept unless its memory moved, then the shared tail). Its arguments are positional, in
    the order of `launcher.writes`' names: each one's tilesafe tensor, then what was passed for
    it (a Partition or that tensor), then its first element's address — the caller's values
    without dictionaries to build and read (launch_cache's written-out layouts pass them so
    when their names come in this order; LayoutLauncher.direct maps its dictionaries)."""
    sets = launcher._sets
    ns = {"__name__": __name__, **_TAIL, "Future": Future,
          "SETS": sets.sets, "MAKE": sets.make, "DEVICE": launcher.device_index}
    names = [name for name, _ in launcher.writes]
    count = len(names)
    params = ", ".join([f"t{k}" for k in range(count)] + [f"g{k}" for k in range(count)]
                       + [f"p{k}" for k in range(count)])
    src = [f"def direct(self, {params}):"]
    for k, name in enumerate(names):
        # data_ptr() is 0 for an empty view: its offset comes from storage_offset()
        src += [f"    v{k} = t{k}._t",
                f"    st{k} = v{k}.untyped_storage()",
                f"    sp{k}, n{k} = st{k}.data_ptr(), st{k}.nbytes()",
                f"    o{k} = p{k} - sp{k} if p{k} else v{k}.storage_offset() * v{k}.element_size()",
                f"    b{k} = SETS[{k}]",
                f"    if b{k} is None or b{k}[1] != sp{k} or b{k}[3] != o{k} or b{k}[2] != n{k}:",
                f"        MAKE({k}, v{k}, sp{k}, n{k}, o{k})"]
    views = ", ".join(f"{name!r}: v{k}" for k, name in enumerate(names))
    held = "".join(f"v{k}, " for k in range(count))
    outs = "".join(f"g{names.index(name)}, " for name in launcher.output_names)
    src += [f"    views = {{{views}}}"]
    src += [f"    s{k} = t{k}._state" for k in range(count)]
    tail = start_pending_source([f"s{k}" for k in range(count)], "SETS", launcher.write_flags,
                                "self.values(None, views)", f"({held})", None, "self._streams", "DEVICE")
    src += ["    " + line for line in tail]
    src += [f"    return Future(({outs}), done)"]
    exec(compile("\n".join(src), f"<layout launch of {launcher.compiled.kernel.name}>", "exec"), ns)  # noqa: S102
    return ns["direct"]
