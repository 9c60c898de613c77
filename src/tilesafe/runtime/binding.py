"""Binding a launch's arguments to a kernel's parameters (S5, S6).

Checks kinds, dtypes, ranks, static and named dimensions, fills in omitted `int`/`Const`
parameters from extents and tiles, and infers the grid. Works on real tensors and
partitions and on `ts.spec`s alike, so inspection and launch share one path. Nothing here
touches memory or changes state: a refused launch writes nothing.
"""
from __future__ import annotations

import inspect
import math
import weakref
from dataclasses import dataclass, field

from .. import dtypes
from ..dtypes import DType
from ..errors import LaunchError
from ..lang.annotations import CONST, KIND_NAMES, MUT, MUT_LAST, MUT_TILES, OUTPUTS, PTR, REF, SCALAR
from .partition import Partition
from .spec import Spec
from .tensor import Tensor


@dataclass
class ArgFacts:
    """What a launch knows about one tensor argument.

    Tensors and partitions are held weakly: a cached launch plan must not keep a
    partition (and so its lending) or a tensor's memory alive.
    """
    ref: object                      # weakref to a Tensor or Partition, or a Spec
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType
    tile: tuple[int, ...] | None     # the partition's tile
    prefix: bool = False

    @property
    def obj(self):
        return self.ref if isinstance(self.ref, Spec) else self.ref()

    @property
    def tensor(self) -> Tensor | None:
        o = self.obj
        if isinstance(o, Partition):
            return o._tensor
        return o if isinstance(o, Tensor) else None


@dataclass
class Bound:
    tensors: dict = field(default_factory=dict)    # name -> ArgFacts
    consts: dict = field(default_factory=dict)     # name -> Python value
    scalars: dict = field(default_factory=dict)    # name -> Python number
    grid: tuple[int, ...] = ()
    borrowed: list = field(default_factory=list)   # tensors made from torch arguments, alive for the launch


def facts_of(name: str, arg) -> ArgFacts | None:
    if isinstance(arg, Partition):
        arg._check_live()
        arg._check_torch_untouched()
        t = arg._tensor._torch()
        return ArgFacts(weakref.ref(arg), tuple(t.shape), tuple(t.stride()), arg._tensor._dtype, arg._tile,
                        arg._prefix)
    if isinstance(arg, Tensor):
        arg._check_usable(name)
        t = arg._torch()
        return ArgFacts(weakref.ref(arg), tuple(t.shape), tuple(t.stride()), arg._dtype, None)
    if isinstance(arg, Spec):
        return ArgFacts(arg, arg.shape, arg.strides, arg.dtype, arg.tile)
    return None


def is_torch_tensor(arg) -> bool:
    return type(arg).__module__.startswith("torch") and hasattr(arg, "data_ptr")


def given_arguments(kernel, args, kwargs) -> dict:
    """The launch's arguments by parameter name (omitted ones absent); a call Python would refuse is refused."""
    try:
        return dict(kernel.signature.bind_partial(*args, **kwargs).arguments)
    except TypeError as e:
        raise LaunchError(f"bad arguments to `{kernel.name}`: {e}") from None


def bind(kernel, args, kwargs, grid, unsafe_launch: bool) -> Bound:
    given = given_arguments(kernel, args, kwargs)
    out = Bound()
    for p in kernel.params:
        if p.is_tensor:
            if p.name not in given:
                raise LaunchError(f"`{kernel.name}` is missing the tensor argument `{p.name}`")
            out.tensors[p.name] = _tensor_arg(kernel, p, given[p.name], out)
    for p in kernel.params:
        if p.is_tensor:
            _bind_tensor(kernel, p, out, given)
    for p in kernel.params:
        if p.kind in (CONST, SCALAR):
            _bind_value(kernel, p, out, given)
    out.grid = _grid(kernel, out, grid, unsafe_launch)
    _check_group_outputs(kernel, out)
    return out


def _check_group_outputs(kernel, out: Bound) -> None:
    """S5 for `ts.MutLast` outputs: one tile per group, i.e. their partition's grid is the
    launch grid without axis 0 (S16)."""
    for name, f in out.tensors.items():
        if kernel.param(name).kind != MUT_LAST:
            continue
        groups = tuple(out.grid[1:]) if out.grid else ()
        g = tuple(-(-n // t) for n, t in zip(f.shape, f.tile))
        want = (groups + (1,) * len(g))[:len(g)]
        if f.prefix or g != want or len(groups) > len(g) and any(x != 1 for x in groups[len(g):]):
            raise LaunchError(f"`{name}` is a ts.MutLast output with one tile per group, so its partition's grid "
                              f"must be the launch grid {out.grid} without axis 0, {groups or (1,)}; it is {g}"
                              f"{' (a partition_prefix)' if f.prefix else ''}",
                              help=f"partition `{name}` so it has one tile per grid index of axes 1.. "
                                   "(the members of a group differ on axis 0)")


def _tensor_arg(kernel, p, arg, out: Bound) -> ArgFacts:
    if is_torch_tensor(arg):
        from .constructors import from_torch
        arg = from_torch(arg)
        out.borrowed.append(arg)
    f = facts_of(p.name, arg)
    if f is None:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` must be a tilesafe tensor"
                          f"{' partition' if p.kind in OUTPUTS else ''}, got {type(arg).__name__}",
                          help="make one with ts.tensor(array), ts.from_torch(t) or ts.zeros(shape)")
    is_partition = f.tile is not None
    if p.kind in OUTPUTS and not is_partition:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` is a plain tensor, but an output "
                          f"({KIND_NAMES[p.kind]}) needs a partition",
                          help=f"pass `{p.name}.partition(tile)`: the partition lends it to the launch")
    if p.kind in (REF, PTR) and is_partition:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` is a partition, but a "
                          f"{'ts.Ref' if p.kind == REF else 'ts.Ptr'} takes the tensor itself",
                          help="partitions are for outputs; pass the tensor (unpartition it first)")
    if p.kind == PTR and isinstance(f.obj, Tensor) and not f.obj._torch().is_contiguous():
        raise LaunchError(f"ts.Ptr argument `{p.name}` must be contiguous", help="pass a contiguous tensor")
    return f


def _bind_tensor(kernel, p, out: Bound, given) -> None:
    f = out.tensors[p.name]
    dtype = p.dtype
    if isinstance(dtype, str):
        _set(kernel, out.consts, dtype, f.dtype, f"the dtype of `{p.name}`", given)
    elif f.dtype != dtype:
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` has dtype {f.dtype.name}, "
                          f"but the kernel declares {dtype.name}",
                          help=f"convert the data to {dtype.name} before the launch")
    if p.kind == PTR:
        return
    if len(f.shape) != len(p.shape):
        raise LaunchError(f"argument `{p.name}` of `{kernel.name}` has rank {len(f.shape)} "
                          f"(shape {f.shape}), but the kernel declares rank {len(p.shape)} ({p.shape})")
    if p.kind in OUTPUTS:
        for axis, (entry, t) in enumerate(zip(p.shape, f.tile)):
            if isinstance(entry, int):
                if entry != t:
                    raise LaunchError(f"`{p.name}` is partitioned with tile {f.tile}, but the kernel's tile is "
                                      f"{p.shape} (axis {axis}: {t} != {entry})",
                                      help=f"partition it with {tuple(e if isinstance(e, int) else '?' for e in p.shape)}")
            else:
                _set(kernel, out.consts, entry, t, f"the tile of `{p.name}` (axis {axis})", given)
    else:
        for axis, (entry, n) in enumerate(zip(p.shape, f.shape)):
            if isinstance(entry, int) and entry != -1 and entry != n:
                raise LaunchError(f"argument `{p.name}` of `{kernel.name}` has shape {f.shape}, but axis {axis} "
                                  f"must be {entry}")
            if isinstance(entry, str):
                target = out.consts if kernel.param(entry).kind == CONST else out.scalars
                _set(kernel, target, entry, n, f"dimension {axis} of `{p.name}`", given)


def _set(kernel, table: dict, name: str, value, source: str, given) -> None:
    if name in given:
        if _differs(given[name], value):
            raise LaunchError(f"`{name}` = {given[name]!r} was passed, but {source} is {value!r}",
                              help=f"omit `{name}` (it is inferred) or pass a matching value")
    if name in table and _differs(table[name], value):
        what = "a dtype" if isinstance(value, DType) else "a dimension"
        raise LaunchError(f"`{name}` is {table[name]!r} from one argument but {value!r} from {source}",
                          help=f"arguments that share {what} name must agree"
                               + (": convert one with astype / .to(...)" if what == "a dtype" else ""))
    table[name] = value


def _differs(a, b) -> bool:
    if isinstance(a, DType) or isinstance(b, DType):
        try:
            return dtypes.coerce(a) != dtypes.coerce(b)
        except (ValueError, TypeError):
            return True
    return a != b


def _bind_value(kernel, p, out: Bound, given) -> None:
    table = out.consts if p.kind == CONST else out.scalars
    if p.name in given:
        value = given[p.name]
        if p.dtype is DType:
            try:
                value = dtypes.coerce(value)
            except (ValueError, TypeError):
                raise LaunchError(f"`{p.name}` of `{kernel.name}` must be a dtype, got {value!r}") from None
        elif not _fits(value, p.dtype):
            raise LaunchError(f"`{p.name}` of `{kernel.name}` must be {p.dtype.__name__}, got "
                              f"{type(value).__name__} {value!r}")
        if p.name in table and _differs(table[p.name], value):
            raise LaunchError(f"`{p.name}` = {value!r} was passed, but the arguments imply {table[p.name]!r}")
        table[p.name] = value
    elif p.name not in table:
        if p.default is inspect.Parameter.empty:
            raise LaunchError(f"`{kernel.name}` is missing `{p.name}`, and no argument shape implies it",
                              help=f"pass {p.name}=...")
        table[p.name] = p.default


def _fits(value, kind) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _grid(kernel, out: Bound, grid, unsafe_launch: bool) -> tuple[int, ...]:
    if grid is not None:
        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        if not grid or any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in grid) or len(grid) > 3:
            raise LaunchError(f"grid {grid!r} must be 1 to 3 non-negative ints")
    muts = [(n, f) for n, f in out.tensors.items() if kernel.param(n).kind == MUT]
    if muts:
        inferred = None
        for name, f in muts:
            g = tuple(-(-n // t) for n, t in zip(f.shape, f.tile))
            if inferred is None:
                inferred, first = g, name
            elif g != inferred:
                raise LaunchError(f"the partitions disagree on the grid: `{first}` has {inferred}, `{name}` has {g}",
                                  help="partition the outputs so they have the same number of tiles per axis")
        if grid is None:
            return inferred
        prefix = all(f.prefix for _, f in muts)
        if grid == inferred:
            return grid
        if prefix and len(grid) == len(inferred) and all(a <= b for a, b in zip(grid, inferred)):
            return grid
        raise LaunchError(f"grid {grid} does not match the grid {inferred} the partitions imply",
                          help="omit grid=, or use t.partition_prefix(tile) to launch a leading part of it")
    persistent = any(kernel.param(n).kind == MUT_TILES for n in out.tensors)
    if persistent and grid is not None and any(g != 1 for g in grid[1:]):
        raise LaunchError(f"grid {grid} has more than one axis, but `{kernel.name}` is persistent (ts.MutTiles): "
                          "every program along the other axes would walk the same tiles again",
                          help=f"pass a 1-D grid, e.g. grid=({math.prod(grid)},)")
    if grid is not None:
        return grid
    if unsafe_launch:
        raise LaunchError(f"unsafe kernel `{kernel.name}` has no ts.Mut output to infer its grid from",
                          help="pass grid=(n,) to unsafe_launch")
    return None
