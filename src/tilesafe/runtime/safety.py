"""Launch-time memory checks on real tensors: aliasing (S7), frozen bytes written through a
ts.Ptr (runtime/freeze.py) and initialisation (S14)."""
from __future__ import annotations

from ..errors import AliasError, OwnershipError
from ..lang.annotations import PTR, OUTPUTS
from ..settings import graph_var
from .aliasing import overlaps, self_overlaps
from .freeze import refuse_frozen_write


def check_launch(kernel, bound, spec) -> None:
    """S7, frozen ts.Ptr targets and S14 on the real memory of a bound launch of the specialization `spec`."""
    real = {n: f for n, f in bound.tensors.items() if f.tensor is not None}
    sets = {n: f.tensor._byte_set() for n, f in real.items()}
    for name, f in real.items():
        kind = kernel.param(name).kind
        if kind not in (*OUTPUTS, PTR):
            continue
        if kind == PTR:                  # (an output is a partition: refused when it was made)
            refuse_frozen_write(kernel.name, name, f.tensor._state, f.tensor._torch())
        if self_overlaps(sets[name]):
            raise AliasError(f"output `{name}` of `{kernel.name}` overlaps itself (a stride-0 or overlapping view)",
                             help="write into a tensor whose elements are distinct, e.g. a fresh ts.empty(shape)")
        for other, s in sets.items():
            if other != name and overlaps(sets[name], s):
                raise AliasError(f"output `{name}` of `{kernel.name}` shares memory with argument `{other}`",
                                 help=f"an output's bytes must not be reachable through another argument; "
                                      f"pass a separate tensor for `{name}`")
    loaded = spec.reads
    capture = graph_var.get()   # inside ts.graph(), what earlier captured launches will have written counts
    for name, f in real.items():
        kind = kernel.param(name).kind
        if kind in OUTPUTS and name not in loaded or kind == PTR:
            continue
        t = f.tensor
        written = t._state.is_written(t._torch()) if capture is None else capture.is_written(t._state, t._torch())
        if not written:
            raise OwnershipError(f"argument `{name}` of `{kernel.name}` is read, but it came from ts.empty and "
                                 "has not been written",
                                 help="write it first (a launch whose partition covers it, or a host write), "
                                      "or create it with ts.zeros")


def mark_written(bound, names) -> None:
    """After a launch: the outputs it wrote completely are initialised (S14). Inside
    ts.graph() the launch only was recorded: the graph marks them when it first replays."""
    if bound.grid is not None and 0 in bound.grid:
        return   # no program ran (a persistent kernel launched with grid=0): nothing was written
    capture = graph_var.get()
    for name in names:
        f = bound.tensors[name]
        t = f.tensor
        if t is None:
            continue
        view = t._torch()
        if f.prefix and bound.grid:
            slices = tuple(slice(0, g * tile) for g, tile in zip(bound.grid, f.tile))
            view = view[slices]
        if capture is not None:
            capture.defer_written(t._state, view)
        else:
            t._state.mark_written(view)
