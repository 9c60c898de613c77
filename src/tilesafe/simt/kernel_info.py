"""What the analysis learns about a SIMT kernel, read by the executor and the lowering.

`KernelInfo` lists the kernel's permit walks, shared arrays, constant tables, and which reads
are proven in bounds or checked; nodes are named by `node_key` (their source span), so the
CPU executor and the numba lowering can find them again in their own copies of the tree.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..dtypes import DType
from . import mappings as M
from . import stubs


@dataclass
class Walk:
    """One `for p in target.permits(mapping):` loop."""
    node: ast.For
    permit: str
    target: str
    shared: bool
    kind: str
    size: object = 1       # int, or the name of a Const parameter
    offset: object = 0
    rank: int = 1
    unconditional: bool = False   # at the top level, writing its target unconditionally: covers it (S14)


@dataclass
class SharedDecl:
    name: str
    shape: tuple           # ints or Const names; a dynamic array's one entry names an `int` parameter
    dtype: DType
    node: ast.AST
    dynamic: bool = False  # sized at launch from an `int` parameter: CUDA's dynamic shared memory


@dataclass
class KernelInfo:
    walks: list = field(default_factory=list)
    shared: dict = field(default_factory=dict)       # name -> SharedDecl
    proven: set = field(default_factory=set)         # node_key()s of reads proven in bounds
    checked: list = field(default_factory=list)      # (tensor name, node) of reads checked at run time
    atomics: list = field(default_factory=list)
    uses_warp_ops: bool = False
    tables: dict = field(default_factory=dict)       # name -> constant.Table the kernel reads
    raw_stores: set = field(default_factory=set)     # node_key()s of unsafe writes at computed indices
    raw_store_targets: set = field(default_factory=set)    # the outputs those writes go to
    raw_atomic_targets: set = field(default_factory=set)   # outputs an unsafe kernel updates atomically


def node_key(node) -> tuple:
    """A node's place in the source: the same for the node in a copy of the tree."""
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def resolve_op(node, scope) -> str | None:
    """The simt operation a call's function names (`simt.barrier`, or a bare imported stub)."""
    from .. import simt
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if scope.get(node.value.id) is simt:
            return node.attr
    if isinstance(node, ast.Name):
        obj = scope.get(node.id)
        if getattr(obj, "__module__", "") in (stubs.__name__, M.__name__):
            return obj.__name__
    return None
