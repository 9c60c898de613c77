"""The typed tile IR: values, ops with regions, and a printer.

Every value has a static type: a `TileType` (shape () is a scalar) or a `TensorType`
(a kernel parameter backed by memory). Ops are one plain dataclass: an opcode from
`OPCODES`, operands, results, attributes and nested regions (loop bodies, if-branches).
The IR knows nothing about Triton or NumPy; backends walk it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..dtypes import DType
from ..errors import Loc


@dataclass(frozen=True, slots=True)
class TileType:
    shape: tuple[int, ...]
    dtype: DType

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def __str__(self) -> str:
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]" if self.shape else self.dtype.name


@dataclass(frozen=True, slots=True)
class TensorType:
    kind: str                       # annotations.MUT / REF / MUT_TILES / PTR
    dtype: DType
    rank: int
    tile: tuple[int, ...] | None    # the output tile (Mut, MutTiles)

    def __str__(self) -> str:
        tile = f", tile={self.tile}" if self.tile else ""
        return f"{self.kind}<{self.dtype.name}, rank={self.rank}{tile}>"


@dataclass(eq=False, slots=True)
class Value:
    type: TileType | TensorType
    name: str = ""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype


@dataclass(eq=False, slots=True)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class Op:
    opcode: str
    args: tuple[Value, ...] = ()
    results: tuple[Value, ...] = ()
    attrs: dict = field(default_factory=dict)
    regions: tuple[Block, ...] = ()
    loc: Loc | None = None

    @property
    def result(self) -> Value:
        return self.results[0]


@dataclass(eq=False, slots=True)
class Param:
    """A kernel parameter as the IR sees it: tensors and runtime scalars are Values."""
    name: str
    kind: str
    value: Value | None     # None for Const parameters (folded into the IR)


@dataclass(eq=False, slots=True)
class Function:
    name: str
    params: list[Param]
    body: Block
    grid_rank: int          # axes of the launch grid
    unsafe: bool = False

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


# Opcodes, their operands and attributes. Backends implement each one.
OPCODES = {
    "const": "() -> scalar; attrs value",
    "block_id": "() -> i32; attrs axis",
    "num_blocks": "() -> i32; attrs axis",
    "arrive": "() -> bool; True in the last block of its group to arrive (blocks equal on grid axes 1..) (S16)",
    "extent": "(tensor) -> int; attrs axis",
    "num_tiles": "(tensor) -> i32; attrs axis, tile (ceil(extent / tile))",
    "binary": "(a, b) -> tile; attrs op in + - * / // % & | ^ << >> max min pow",
    "compare": "(a, b) -> bool tile; attrs op in < <= > >= == !=",
    "unary": "(a) -> tile; attrs op in neg not invert exp exp2 log log2 sqrt rsqrt sin cos tanh sigmoid erf abs floor ceil",
    "where": "(cond, a, b) -> tile",
    "fma": "(a, b, c) -> tile",
    "cast": "(a) -> tile; attrs dtype",
    "full": "() -> tile; attrs shape, value, dtype",
    "arange": "() -> i32 tile; attrs start, stop",
    "reduce": "(a) -> tile; attrs op in sum max min argmax argmin, axis, keepdims",
    "cumsum": "(a) -> tile; attrs axis",
    "mma": "(a, b, acc) -> acc; attrs precision",
    "reshape": "(a) -> tile; attrs shape",
    "permute": "(a) -> tile; attrs dims",
    "broadcast_to": "(a) -> tile; attrs shape",
    "expand_dims": "(a) -> tile; attrs axis",
    "join": "(a, b) -> tile with a new last axis of 2",
    "rand": "(seed, offsets) -> f32 tile of offsets' shape: Philox 4x32-10 uniform in [0, 1) (tl.rand)",
    "load": "(tensor, *index) -> tile; attrs shape, padding, mode (tile|block|subtile|member), sub",
    "valid": "(tensor, *index) -> bool tile; attrs as the load it describes",
    "prefetch": "(tensor, *index); attrs shape, mode (tile), keep: an L2 hint for a Ref tile, no value (prefetch.py)",
    "store": "(tensor, tile, *index); attrs mode (block|subtile|tile|group), sub",
    "gather": "(tensor, idx, *index) -> tile; attrs axis, shape, padding",
    "scatter": "(tensor, tile, rows, *index): row i of the tile to row rows[index[0] * tile[0] + i] where that "
               "entry is in range and unique (scatter.py); other axes at tile index[1:]",
    "print": "(*values); attrs fmt",
    "for": "(lo, hi, step, *init) -> carried; region body(iv, *carried) ending in yield",
    "if": "(cond, *()) -> results; regions then, else, each ending in yield",
    "while": "(*init) -> carried; regions before(*carried)->yield(cond, *carried), body(*carried)->yield",
    "tiles": "(*window bounds) -> carried; attrs output, group, windowed, first; region body(*idx, *carried)",
    "subtiles": "(*init) -> carried; attrs output, shape; region body(*idx, *carried)",
    "yield": "(*values)",
    "load_ptr": "(ptr, offsets, mask?, other?) -> tile",
    "store_ptr": "(ptr, offsets, values, mask?)",
    "atomic": "(ptr, offsets, values, mask?) -> old; attrs op in add max min",
    "atomic_cas": "(ptr, offsets, cmp, values) -> old",
}


def walk(block: Block):
    """Every op in a block and its regions, outer ops first."""
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from walk(region)


def format_function(fn: Function) -> str:
    """A readable dump of the IR (what `kernel.ir(...)` returns)."""
    names: dict[int, str] = {}
    counter = itertools.count()

    def name(v: Value) -> str:
        if id(v) not in names:
            names[id(v)] = f"%{v.name}" if v.name else f"%{next(counter)}"
        return names[id(v)]

    lines = []
    params = ", ".join(f"{name(p.value)}: {p.value.type}" for p in fn.params if p.value is not None)
    lines.append(f"func @{fn.name}({params}) grid_rank={fn.grid_rank}{' unsafe' if fn.unsafe else ''} {{")
    _format_block(fn.body, 1, name, lines)
    lines.append("}")
    return "\n".join(lines)


def _format_block(block: Block, depth: int, name, lines: list[str]) -> None:
    pad = "  " * depth
    for op in block.ops:
        res = ", ".join(name(r) for r in op.results)
        lhs = f"{res} = " if res else ""
        args = ", ".join(name(a) for a in op.args)
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in op.attrs.items())
        types = " : " + ", ".join(str(r.type) for r in op.results) if op.results else ""
        line = f"{pad}{lhs}{op.opcode}({args}){' {' + attrs + '}' if attrs else ''}{types}"
        if op.loc is not None:
            line += f"  # line {op.loc.line}"
        lines.append(line)
        for i, region in enumerate(op.regions):
            head = ", ".join(f"{name(a)}: {a.type}" for a in region.args)
            lines.append(f"{pad}  ^region{i}({head}):")
            _format_block(region, depth + 2, name, lines)


def _short(v) -> str:
    return v.name if isinstance(v, DType) else repr(v)
