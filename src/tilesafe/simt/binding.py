"""Binding a SIMT launch's arguments to the kernel's parameters, and the grid they imply.

Tensors may be tilesafe tensors or torch tensors (borrowed with `ts.from_torch`, S13); a
tensor lent to a partition or handed to torch is refused (S8), through the runtime's own
`facts_of`. Dtypes, ranks, named extents and scalar kinds are checked, omitted `int` and
`Const` shape parameters are filled in from the extents, and the grid is derived from the
outputs' permit mappings: an explicit `grid=` must equal it ("the grid covers the outputs
exactly"), except for a grid-stride walk, which takes any grid. Nothing here touches memory.
"""
from __future__ import annotations

import inspect

from ..errors import LaunchError
from ..runtime.binding import ArgFacts, Bound, facts_of, given_arguments, is_torch_tensor
from ..runtime.partition import Partition
from . import mappings as M
from .params import CONST, DISJOINT, KIND_NAMES, SCALAR

GRID_LIMITS = (2**31 - 1, 65535, 65535)


def bind(kernel, args, kwargs, grid) -> Bound:
    given = given_arguments(kernel, args, kwargs)
    out = Bound()
    values: dict = {}
    for p in kernel.params:
        if p.is_tensor:
            if p.name not in given:
                raise LaunchError(f"`{kernel.name}` is missing the tensor argument `{p.name}`")
            out.tensors[p.name] = _tensor(kernel, p, given[p.name], out)
    for p in kernel.params:
        if p.is_tensor:
            _check_tensor(kernel, p, out.tensors[p.name], values, given)
    for p in kernel.params:
        if p.kind in (SCALAR, CONST):
            _scalar(kernel, p, given, values)
            (out.consts if p.kind == CONST else out.scalars)[p.name] = values[p.name]
    devices = {f.tensor._torch().device for f in out.tensors.values()}
    if len(devices) > 1:
        raise LaunchError(f"the tensors of `{kernel.name}` are on different devices: "
                          f"{', '.join(sorted(map(str, devices)))}", help="move them to one device")
    out.grid = _grid(kernel, out, grid)
    return out


def _tensor(kernel, p, arg, out: Bound) -> ArgFacts:
    if is_torch_tensor(arg):
        from ..runtime.constructors import from_torch
        arg = from_torch(arg)
        out.borrowed.append(arg)
    if isinstance(arg, Partition):
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` is a partition; SIMT kernels take whole "
                          "tensors (their permits split the output)", help="pass the tensor itself")
    f = facts_of(p.name, arg)
    if f is None:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` ({KIND_NAMES[p.kind]}) must be a tensor, got "
                          f"{type(arg).__name__}", help="pass a tilesafe or torch tensor")
    # hold the tensor strongly for the launch (facts_of holds it weakly, for cached plans)
    return ArgFacts(StrongRef(f.obj), f.shape, f.strides, f.dtype, None)


class StrongRef:
    """A strong reference with weakref's call syntax (ArgFacts.obj calls its ref)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __call__(self):
        return self.obj


def _check_tensor(kernel, p, f: ArgFacts, values: dict, given) -> None:
    if f.dtype != p.dtype:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` has dtype {f.dtype.name}, but the kernel "
                          f"declares {p.dtype.name}", help=f"convert it to {p.dtype.name} first")
    if len(f.shape) != len(p.shape):
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` has rank {len(f.shape)} (shape {f.shape}), "
                          f"but the kernel declares rank {len(p.shape)}")
    for axis, (entry, n) in enumerate(zip(p.shape, f.shape)):
        if isinstance(entry, int) and entry != -1 and entry != n:
            raise LaunchError(f"argument `{p.name}` of `{kernel.name}` has shape {f.shape}, but axis {axis} "
                              f"must be {entry}")
        if isinstance(entry, str):
            seen = values.get(entry, given.get(entry))
            if seen is not None and seen != n:
                raise LaunchError(f"`{entry}` is {seen}, but dimension {axis} of `{p.name}` is {n}",
                                  help=f"tensors whose shapes share the name `{entry}` must agree")
            values[entry] = n


def _scalar(kernel, p, given, values) -> None:
    if p.name in given:
        v = given[p.name]
        if p.name in values and values[p.name] != v:
            raise LaunchError(f"`{p.name}` is {v}, but the extents give {values[p.name]}")
    elif p.name in values:
        v = values[p.name]
    elif kernel.signature.parameters[p.name].default is not inspect.Parameter.empty:
        v = kernel.signature.parameters[p.name].default
    else:
        raise LaunchError(f"`{kernel.name}` is missing the argument `{p.name}`",
                          help=f"pass {p.name}=... (or give the parameter a default)")
    ok = isinstance(v, bool) if p.dtype is bool else isinstance(v, int) and not isinstance(v, bool) \
        if p.dtype is int else isinstance(v, (int, float)) and not isinstance(v, bool)
    if not ok:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` must be {p.dtype.__name__}, got {v!r}")
    values[p.name] = p.dtype(v)


def resolved(walk, consts) -> M.Mapping:
    def value(v):
        return consts[v] if isinstance(v, str) else v
    return M.Mapping(walk.kind, value(walk.size), value(walk.offset))


def covered_targets(kernel, bound) -> tuple:
    """The outputs this launch writes whole (S14): each target of an unconditional walk whose permits
    cover it, once, in walk order; none when the grid is empty (no thread runs)."""
    if 0 in bound.grid:
        return ()
    return tuple(dict.fromkeys(w.target for w in kernel.info.walks
                               if not w.shared and w.unconditional and M.covers_all(resolved(w, bound.consts))))


def _grid(kernel, out: Bound, grid) -> tuple:
    block = kernel.contract.block
    derived, free = None, False
    for walk in kernel.info.walks:
        if walk.shared:
            continue
        shape = out.tensors[walk.target].shape
        m = resolved(walk, out.consts)
        if m.kind == M.AT and (m.size < 1 or m.offset < 0) or m.kind in M.WITH_SIZE and m.size < 0 \
                or m.kind in (M.RUN, M.CHUNK) and m.size < 1:
            raise LaunchError(f"the permits of `{walk.target}` in `{kernel.name}` come from simt.{m.kind} with "
                              f"size {m.size}{f' and offset {m.offset}' if m.kind == M.AT else ''}, which does not "
                              "give each thread its own elements",
                              help="pass Const values that make the mapping injective (sizes >= 1, offsets >= 0)")
        g = M.grid_of(m, shape, block)
        if g is None:
            free = True
            continue
        g = tuple(g) + (1,) * (3 - len(g))
        if derived is not None and g != derived:
            raise LaunchError(f"the outputs of `{kernel.name}` imply different grids: {derived} and {g} "
                              f"(from `{walk.target}`)", help="give the outputs matching shapes")
        derived = g
    if grid is not None:
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        if not all(isinstance(g, int) and g >= 0 for g in grid) or not 1 <= len(grid) <= 3:
            raise LaunchError(f"grid={grid!r} must be 1 to 3 non-negative ints")
        grid = grid + (1,) * (3 - len(grid))
        if derived is not None and grid != derived:
            raise LaunchError(f"grid {grid} does not cover the outputs of `{kernel.name}` exactly: their permits "
                              f"need grid {derived}", help="omit grid=; it is derived from the outputs' permits")
        derived = grid
    if derived is None:
        if free:
            first = next(w for w in kernel.info.walks if not w.shared)
            n = out.tensors[first.target].shape[0]
            derived = (max(1, min(M.ceil_div(n, kernel.contract.threads), 2 if _on_cpu(out) else 1024)), 1, 1)
        else:
            raise LaunchError(f"`{kernel.name}` has no output permits to derive its grid from",
                              help=f"pass it: {kernel.name}.launch(..., grid=(blocks,))")
    for g, limit, axis in zip(derived, GRID_LIMITS, "xyz"):
        if g > limit:
            raise LaunchError(f"the grid needs {g} blocks along {axis}, more than the limit {limit}",
                              help="use a grid-stride or larger-slab mapping")
    return derived


def _on_cpu(out: Bound) -> bool:
    return all(f.tensor._torch().device.type == "cpu" for f in out.tensors.values())


def written_names(kernel) -> list:
    return [p.name for p in kernel.params if p.kind == DISJOINT]

