"""Parameter annotations: the access discipline of a kernel, written in its signature.

`ts.Mut[dtype, tile]`, `ts.Ref[dtype, shape]`, `ts.MutTiles[dtype, tile]`,
`ts.MutLast[dtype, tile]`, `ts.Ptr[dtype]` and `ts.Const[type]` are subscripted into `ParamSpec` objects; plain `int`, `float` and
`bool` annotations are runtime scalars. The frontend reads these, never the raw syntax.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DType

# Parameter kinds. A kernel's outputs are MUT, MUT_TILES or MUT_LAST; REF is read-only.
MUT, REF, MUT_TILES, MUT_LAST, PTR, CONST, SCALAR = "mut", "ref", "mut_tiles", "mut_last", "ptr", "const", "scalar"
OUTPUTS = (MUT, MUT_TILES, MUT_LAST)
KIND_NAMES = {MUT: "ts.Mut", REF: "ts.Ref", MUT_TILES: "ts.MutTiles", MUT_LAST: "ts.MutLast", PTR: "ts.Ptr",
              CONST: "ts.Const"}


@dataclass(frozen=True, slots=True)
class ParamSpec:
    kind: str
    dtype: DType | str | type | None   # a DType, the name of a Const dtype parameter, or a Python type
    shape: tuple = ()                  # tile shape (Mut/MutTiles) or tensor shape (Ref)

    @property
    def is_tensor(self) -> bool:
        return self.kind in (*OUTPUTS, REF, PTR)

    @property
    def is_output(self) -> bool:
        return self.kind in OUTPUTS


class _Subscriptable:
    """`Kind[dtype, shape]` builds a ParamSpec; the bare kind is not a valid annotation."""

    def __init__(self, kind: str, arity: int, doc: str):
        self.kind, self.arity, self.__doc__ = kind, arity, doc

    def __getitem__(self, item):
        items = item if isinstance(item, tuple) else (item,)
        if len(items) != self.arity:
            raise TypeError(f"ts.{self.name}[...] takes {self.arity} argument(s), got {len(items)}")
        dtype = items[0]
        shape = tuple(items[1]) if self.arity == 2 else ()
        if self.arity == 2 and isinstance(items[1], (int, str)):
            shape = (items[1],)
        return ParamSpec(self.kind, dtype, shape)

    @property
    def name(self) -> str:
        return KIND_NAMES[self.kind][3:]

    def __repr__(self) -> str:
        return f"ts.{self.name}"


Mut = _Subscriptable(MUT, 2, "The block's exclusive output tile: `ts.Mut[dtype, tile_shape]`.")
Ref = _Subscriptable(REF, 2, "A shared read-only tensor: `ts.Ref[dtype, shape]` (ints, -1, or int-parameter names).")
MutTiles = _Subscriptable(MUT_TILES, 2, "An output walked by a persistent kernel: `ts.MutTiles[dtype, tile_shape]`.")
MutLast = _Subscriptable(MUT_LAST, 2, "One tile per group of blocks, written by the group's last block inside "
                                    "`if ts.last_arrival():` (S16): `ts.MutLast[dtype, tile_shape]`.")
Ptr = _Subscriptable(PTR, 1, "A raw pointer (unsafe kernels only): `ts.Ptr[dtype]`.")
Const = _Subscriptable(CONST, 1, "A compile-time constant: `ts.Const[int]` (also bool, float, ts.DType).")
