"""Checks run when `@ts.kernel` is applied, before any launch facts are known.

They catch what the syntax alone shows: unsupported Python constructs, a store or atomic on
a `ts.Ref` parameter (S2), pointer operations in a safe kernel (S4), and tensors captured
from module or closure scope (S2). Everything else is checked when the IR is built.
"""
from __future__ import annotations

import ast

from .annotations import REF
from .signature import ParamInfo
from .source import KernelSource
from .stubs import UNSAFE_OPS
from .unsupported_syntax import help_for

ALLOWED_NODES = (
    ast.FunctionDef, ast.arguments, ast.arg, ast.Assign, ast.AugAssign, ast.Expr, ast.Pass, ast.For, ast.While,
    ast.If, ast.Return, ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Slice, ast.BinOp, ast.UnaryOp,
    ast.Compare, ast.BoolOp, ast.IfExp, ast.Tuple, ast.List, ast.Call, ast.keyword, ast.Starred,
    ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)


def check_definition(src: KernelSource, params: list[ParamInfo], unsafe: bool) -> None:
    refs = {p.name for p in params if p.kind == REF}
    rebound = _assigned(src.tree)
    for node in _body_nodes(src.tree):
        if isinstance(node, ast.FunctionDef) or not isinstance(node, ALLOWED_NODES):
            raise src.error(node, f"`{type(node).__name__}` is not supported in a kernel", help=help_for(node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            _check_call(src, node, refs - rebound, unsafe)
    _check_captures(src, params, rebound)


def _body_nodes(tree):
    for stmt in tree.body:
        yield from ast.walk(stmt)


def _assigned(tree) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _check_call(src: KernelSource, node: ast.Call, refs: set[str], unsafe: bool) -> None:
    func = node.func
    target = func.value.id if isinstance(func.value, ast.Name) else None
    if func.attr == "store" and target in refs:
        raise src.error(func, f"cannot store to `{target}`: it is a read-only input (ts.Ref)",
                        help="write results through the kernel's ts.Mut output")
    if func.attr in UNSAFE_OPS:
        first = node.args[0] if node.args else None
        if not unsafe:
            raise src.error(func, f"`ts.{func.attr}` is only allowed in unsafe kernels",
                            help="declare the kernel with @ts.kernel(unsafe=True) and launch it with "
                                 "kernel.unsafe_launch(...)")
        if isinstance(first, ast.Name) and first.id in refs:
            raise src.error(first, f"`{first.id}` is a read-only input (ts.Ref): no pointer access or atomic on it",
                            help="pass the memory as a ts.Ptr parameter to write it in an unsafe kernel")


def _check_captures(src: KernelSource, params, rebound: set[str]) -> None:
    scope = src.globals_and_closure()
    local = rebound | {p.name for p in params}
    for node in _body_nodes(src.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            value = scope.get(node.id)
            mod = type(value).__module__ or ""
            if value is not None and mod.startswith(("tilesafe.runtime", "torch", "numpy")) and not callable(value) \
                    and not isinstance(value, (int, float, bool)):
                raise src.error(node, f"the kernel captures the tensor `{node.id}` from outside its parameters",
                                help=f"pass `{node.id}` as a parameter (ts.Ref for reading); kernels may not "
                                     "capture tensors")

