"""A SIMT kernel's parameters: the access discipline, written in its signature.

`simt.Ref[dtype, shape]` is a read-only global tensor, `simt.Disjoint[dtype, shape]` an
output written only through permits, `simt.Atomic[dtype, shape]` an accumulation target
that takes atomic operations only, `simt.Const[int]` a compile-time constant; plain `int`,
`float` and `bool` annotations are uniform runtime scalars. Shape entries are ints, -1 (any)
or names of `int`/`Const` parameters, bound from the extents at launch.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from .. import dtypes
from ..dtypes import DType
from ..lang.source import KernelSource

REF, DISJOINT, ATOMIC, CONST, SCALAR = "ref", "disjoint", "atomic", "const", "scalar"
TENSORS = (REF, DISJOINT, ATOMIC)
WRITTEN = (DISJOINT, ATOMIC)
KIND_NAMES = {REF: "simt.Ref", DISJOINT: "simt.Disjoint", ATOMIC: "simt.Atomic", CONST: "simt.Const"}
# Element types a tensor parameter or a constant table may have.
SUPPORTED_DTYPES = (dtypes.f16, dtypes.f32, dtypes.f64, dtypes.i8, dtypes.i16, dtypes.i32, dtypes.i64, dtypes.u8)


@dataclass(frozen=True, slots=True)
class Annotation:
    kind: str
    dtype: object
    shape: tuple = ()


class _Kind:
    """`Kind[dtype, shape]` builds an Annotation; the bare kind is not a valid annotation."""

    def __init__(self, kind: str, arity: int, doc: str):
        self.kind, self.arity, self.__doc__ = kind, arity, doc

    def __getitem__(self, item):
        items = item if isinstance(item, tuple) else (item,)
        if len(items) != self.arity:
            raise TypeError(f"{KIND_NAMES[self.kind]}[...] takes {self.arity} argument(s), got {len(items)}")
        shape = () if self.arity == 1 else items[1]
        shape = (shape,) if isinstance(shape, (int, str)) else tuple(shape)
        return Annotation(self.kind, items[0], shape)

    def __repr__(self) -> str:
        return KIND_NAMES[self.kind]


Ref = _Kind(REF, 2, "A read-only global tensor: `simt.Ref[dtype, shape]`; read with `x[i]` or `x.get(i, default)`.")
Disjoint = _Kind(DISJOINT, 2, "An output written only through permits: `simt.Disjoint[dtype, shape]`.")
Atomic = _Kind(ATOMIC, 2, "An accumulation target with atomic add/max/min only: `simt.Atomic[dtype, shape]`.")
Const = _Kind(CONST, 1, "A compile-time constant: `simt.Const[int]` (also bool, float).")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    dtype: object          # a DType for tensors; int/float/bool for scalars and constants
    shape: tuple
    loc: object

    @property
    def is_tensor(self) -> bool:
        return self.kind in TENSORS


def parse_params(fn, src: KernelSource) -> list[Param]:
    """The kernel's parameters, checked: kinds, dtypes, and shape names that are parameters."""
    nodes = {a.arg: a for a in src.tree.args.args + src.tree.args.kwonlyargs}
    params = []
    for name, p in inspect.signature(fn).parameters.items():
        node = nodes.get(name, src.tree)
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise src.error(node, f"SIMT kernels cannot take *args or **kwargs (`{name}`)",
                            help="name each parameter and annotate it")
        params.append(_param(src, node, name, p.annotation))
    by_name = {p.name: p for p in params}
    for p in params:
        for entry in p.shape:
            if isinstance(entry, str) and (entry not in by_name or by_name[entry].kind not in (SCALAR, CONST)
                                           or by_name[entry].dtype is not int):
                raise src.error(nodes.get(p.name, src.tree),
                                f"shape name `{entry}` of `{p.name}` is not an `int` or `simt.Const[int]` parameter",
                                help=f"add a parameter `{entry}: int` (bound from the extent at launch)")
    return params


def _param(src, node, name, ann) -> Param:
    loc = src.loc(node)
    if isinstance(ann, Annotation):
        if ann.kind in TENSORS and not isinstance(ann.dtype, DType):
            raise src.error(node, f"`{name}` needs a dtype such as ts.f32, got {ann.dtype!r}")
        if ann.kind in TENSORS and not 1 <= len(ann.shape) <= 3:
            raise src.error(node, f"`{name}` has rank {len(ann.shape)}; SIMT tensors have rank 1 to 3")
        return Param(name, ann.kind, ann.dtype, ann.shape, loc)
    if ann in (int, float, bool):
        return Param(name, SCALAR, ann, (), loc)
    if isinstance(ann, _Kind):
        raise src.error(node, f"`{name}: {ann!r}` needs a dtype and a shape, e.g. {ann!r}[ts.f32, (\"N\",)]")
    shown = "no annotation" if ann is inspect.Parameter.empty else f"annotation {ann!r}"
    raise src.error(node, f"parameter `{name}` has {shown}",
                    help="annotate it: simt.Ref/Disjoint/Atomic[dtype, shape], simt.Const[int], int, float or bool")
