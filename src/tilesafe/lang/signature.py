"""A kernel's parameters, read from its annotations, checked at definition.

Every name used in a shape annotation must be a parameter: a `ts.Const` (compile-time) or
a plain `int` (runtime). Output tiles are bound from the partition; named Ref dimensions
from the runtime extents.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..dtypes import DType
from .annotations import CONST, MUT, MUT_LAST, MUT_TILES, OUTPUTS, PTR, REF, SCALAR, ParamSpec
from .source import KernelSource

_SENTINEL = inspect.Parameter.empty


# Every field is required: a dataclass default of `inspect.Parameter.empty` reads as "no
# default" to `inspect.signature`, so the generated __init__ had a required parameter after
# optional ones, which Python 3.10's dataclass (building the class docstring) rejects at import.
@dataclass(frozen=True)
class ParamInfo:
    name: str
    kind: str
    dtype: object          # DType, a Const parameter's name, or a Python type (Const/scalar)
    shape: tuple
    default: object        # inspect.Parameter.empty when the parameter has none
    loc: object

    @property
    def is_tensor(self) -> bool:
        return self.kind in (*OUTPUTS, REF, PTR)


def parse_params(fn, src: KernelSource, unsafe: bool) -> list[ParamInfo]:
    sig = inspect.signature(fn)
    nodes = {a.arg: a for a in src.tree.args.args + src.tree.args.kwonlyargs}
    params = []
    for name, p in sig.parameters.items():
        node = nodes.get(name, src.tree)
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise src.error(node, f"kernels cannot take *args or **kwargs (`{name}`)",
                            help="name each parameter and annotate it")
        params.append(_param(src, node, name, p.annotation, p.default))
    _check(src, params, unsafe)
    return params


def _param(src, node, name, ann, default) -> ParamInfo:
    loc = src.loc(node)
    if isinstance(ann, str):
        raise src.error(node, f"the annotation of `{name}` is a string; tilesafe needs evaluated annotations",
                        help="remove `from __future__ import annotations` from the kernel's module")
    if isinstance(ann, ParamSpec):
        return ParamInfo(name, ann.kind, ann.dtype, tuple(ann.shape), default, loc)
    if ann in (int, float, bool):
        return ParamInfo(name, SCALAR, ann, (), default, loc)
    if ann is _SENTINEL:
        raise src.error(node, f"parameter `{name}` has no annotation",
                        help="annotate it: ts.Mut[dtype, tile], ts.Ref[dtype, shape], ts.Const[int], int or float")
    raise src.error(node, f"parameter `{name}` has an unsupported annotation {ann!r}",
                    help="use ts.Mut, ts.Ref, ts.MutTiles, ts.MutLast, ts.Ptr, ts.Const[...], int, float or bool")


def _check(src: KernelSource, params: list[ParamInfo], unsafe: bool) -> None:
    by_name = {p.name: p for p in params}
    nodes = {a.arg: a for a in src.tree.args.args + src.tree.args.kwonlyargs}
    kinds = {p.kind for p in params}
    if MUT in kinds and MUT_TILES in kinds:
        p = next(p for p in params if p.kind == MUT_TILES)
        raise src.error(nodes[p.name], "a kernel uses either ts.Mut or ts.MutTiles outputs, not both",
                        help="make every output a ts.MutTiles (persistent) or every output a ts.Mut, or split the kernel")
    if MUT_LAST in kinds and MUT not in kinds:
        p = next(p for p in params if p.kind == MUT_LAST)
        raise src.error(nodes[p.name], f"`{p.name}` is a ts.MutLast output, which needs a ts.Mut output beside it",
                        help="each block stores its own ts.Mut tile; the blocks' ts.Mut tiles define the grid and "
                             "its groups (S16)")
    mut_ranks = {len(p.shape) for p in params if p.kind == MUT}
    for p in params:
        node = nodes.get(p.name, src.tree)
        if p.kind == PTR and not unsafe:
            raise src.error(node, f"`{p.name}` is a ts.Ptr, which only unsafe kernels may take",
                            help="declare the kernel with @ts.kernel(unsafe=True), or use ts.Ref / ts.Mut")
        if p.kind == CONST and p.dtype not in (int, bool, float, DType):
            raise src.error(node, f"ts.Const[{p.dtype!r}] is not supported",
                            help="use ts.Const[int], ts.Const[bool], ts.Const[float] or ts.Const[ts.DType]")
        if not p.is_tensor:
            continue
        _check_dtype(src, node, p, by_name)
        if p.kind in OUTPUTS:
            if not 1 <= len(p.shape) <= 3:
                raise src.error(node, f"the tile of `{p.name}` has rank {len(p.shape)}; outputs have rank 1 to 3",
                                help="view the output with .reshape(...) to at most 3 axes on the host")
            for entry in p.shape:
                _check_tile_entry(src, node, p, entry, by_name)
        if p.kind == REF:
            for entry in p.shape:
                _check_shape_entry(src, node, p, entry, by_name)
    if len(mut_ranks) > 1:
        raise src.error(src.tree, "all ts.Mut outputs of a kernel need tiles of one rank (they share the grid)",
                        help="reshape the outputs on the host to one rank")


def _check_dtype(src, node, p: ParamInfo, by_name) -> None:
    if isinstance(p.dtype, DType):
        return
    if isinstance(p.dtype, str) and by_name.get(p.dtype) and by_name[p.dtype].kind == CONST \
            and by_name[p.dtype].dtype is DType:
        return
    raise src.error(node, f"the dtype of `{p.name}` must be a ts dtype (e.g. ts.f32) or the name of a "
                          f"ts.Const[ts.DType] parameter, got {p.dtype!r}",
                    help="write e.g. ts.Ref[ts.f32, (\"N\",)], or add a parameter `T: ts.Const[ts.DType]`")


def _check_tile_entry(src, node, p, entry, by_name) -> None:
    if isinstance(entry, int) and not isinstance(entry, bool):
        if entry <= 0 or entry & (entry - 1):
            raise src.error(node, f"the tile of `{p.name}` has {entry}, which is not a power of two",
                            help="tile shapes are static powers of two")
        return
    if isinstance(entry, str):
        q = by_name.get(entry)
        if q is None:
            raise src.error(node, f"the tile of `{p.name}` names `{entry}`, which is not a parameter",
                            help=f"add a parameter `{entry}: ts.Const[int]`")
        if q.kind != CONST or q.dtype is not int:
            raise src.error(node, f"the tile of `{p.name}` names `{entry}`, which must be a ts.Const[int] parameter",
                            help="tile shapes are compile-time constants")
        return
    raise src.error(node, f"the tile of `{p.name}` has {entry!r}",
                    help="tile entries are ints or names of ts.Const[int] parameters")


def _check_shape_entry(src, node, p, entry, by_name) -> None:
    if isinstance(entry, int) and not isinstance(entry, bool) and (entry >= 0 or entry == -1):
        return
    if isinstance(entry, str):
        q = by_name.get(entry)
        if q is None:
            raise src.error(node, f"the shape of `{p.name}` names `{entry}`, which is not a parameter",
                            help=f"add a parameter `{entry}: int` (the launcher fills it in)")
        if not ((q.kind == SCALAR and q.dtype is int) or (q.kind == CONST and q.dtype is int)):
            raise src.error(node, f"the shape of `{p.name}` names `{entry}`, which must be an int or ts.Const[int]",
                            help=f"annotate `{entry}` as `int` (runtime) or `ts.Const[int]`")
        return
    raise src.error(node, f"the shape of `{p.name}` has {entry!r}",
                    help="shape entries are ints, -1 (any) or names of int parameters")

