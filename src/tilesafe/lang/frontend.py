"""The frontend pipeline entry: a kernel's AST and its launch bindings become typed IR."""
from __future__ import annotations

from .annotations import CONST, MUT, MUT_TILES, SCALAR
from .arrival_rules import check_finished
from .builder import Bindings, Builder
from .ir import Function, Param, TensorType, TileType, Value
from .objects import TensorArg
from .signature import ParamInfo
from .source import KernelSource
from .inline import ReturnValue
from .statements import lower_body


def build_function(name: str, src: KernelSource, params: list[ParamInfo], bindings: Bindings,
                   unsafe: bool, grid_rank: int) -> Function:
    b = Builder(src, unsafe, lower_body)
    b.grid_rank = grid_rank
    ir_params = []
    for p in params:
        if p.kind == CONST:
            b.env[p.name] = bindings.consts[p.name]
            ir_params.append(Param(p.name, p.kind, None))
        elif p.kind == SCALAR:
            v = Value(TileType((), bindings.scalars[p.name]), p.name)
            b.env[p.name] = v
            ir_params.append(Param(p.name, p.kind, v))
        else:
            dtype, rank, tile = bindings.tensors[p.name]
            v = Value(TensorType(p.kind, dtype, rank, tile), p.name)
            b.env[p.name] = TensorArg(p.name, p.kind, v, dtype, rank, tile, p.shape)
            ir_params.append(Param(p.name, p.kind, v))
    try:
        b.lower_body(src.tree.body)
    except ReturnValue:
        raise b.error(None, "a kernel returns nothing; write results with `z.store(tile)`") from None
    check_finished(b, params)
    return Function(name, ir_params, b.block, grid_rank, unsafe)


def grid_rank_of(params: list[ParamInfo]) -> int:
    for p in params:
        if p.kind == MUT:
            return len(p.shape)
    if any(p.kind == MUT_TILES for p in params):
        return 1
    return 3

