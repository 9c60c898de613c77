"""Frontend-side objects that a kernel's names can be bound to, besides IR values.

They exist only while the frontend runs: a tensor parameter, a device-side partition of a
Ref, a minted tile index, a bound method. None of them reaches the IR directly; the ops
that use them take their `Value`s.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import DType
from .annotations import KIND_NAMES, OUTPUTS
from .ir import Value


@dataclass(eq=False)
class TensorArg:
    name: str
    kind: str
    value: Value
    dtype: DType
    rank: int
    tile: tuple[int, ...] | None = None        # Mut/MutTiles: the block's tile
    shape_spec: tuple = ()                     # Ref: annotation entries (ints, -1, names)
    walks: list = field(default_factory=list)  # Locs of tiles() walks (one allowed)

    @property
    def is_output(self) -> bool:
        return self.kind in OUTPUTS

    @property
    def kind_name(self) -> str:
        return KIND_NAMES[self.kind]


@dataclass(eq=False)
class RefView:
    """`x.partition(tile)` inside a kernel: tile-indexed loads of a Ref."""
    tensor: TensorArg
    tile: tuple[int, ...]


@dataclass(eq=False)
class MintedIndex:
    """An unforgeable tile index minted by `z.tiles()`, `z.subtiles()`, `z.scatter(rows)` or
    `z.members()` of one output."""
    brand: TensorArg
    kind: str                     # "tiles", "subtiles" or "members" (of a last-arrival group)
    values: tuple[Value, ...]
    sub: tuple[int, ...] | None   # subtile shape (subtiles only)
    rows: TensorArg | None = None # the index tensor of a `z.scatter(rows)` walk (scatter.py)

    def __len__(self):
        return len(self.values)


@dataclass(eq=False)
class BoundMethod:
    obj: object
    name: str


@dataclass(eq=False)
class DeviceFunction:
    """`@ts.function`: a helper inlined into kernels and checked like them."""
    fn: object

    def __call__(self, *args, **kwargs):
        from ..errors import KernelError
        raise KernelError(f"`{self.fn.__name__}` is a @ts.function and only runs inside a kernel",
                          help="call it from a @ts.kernel")


def function(fn):
    """Mark `fn` as a device helper that kernels may call (it is inlined)."""
    import functools
    return functools.update_wrapper(DeviceFunction(fn), fn)   # keeps __name__, __doc__, ...
