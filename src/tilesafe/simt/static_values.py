"""Values known when a kernel is defined: literals, module-level numbers, `simt.Const` names.

Used for mapping sizes, shared shapes and axes, by the analysis and the lowering alike (`ck`: either,
with `params`, `scope` and `own`, the names the kernel binds). A `simt.Const[int]` parameter
stands for itself (its name, bound at launch); ints fold through + - * //. A module-level name
counts where the kernel does not hide it with a parameter or an assigned name of its own.
"""
from __future__ import annotations

import ast
import types

from ..dtypes import DType
from .params import CONST

_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
         ast.FloorDiv: lambda a, b: a // b}


def static_value(ck, node):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ck.params:            # a Const stands for itself; other parameters are run-time values
            return node.id if ck.params[node.id].kind == CONST else None
        if node.id in ck.own:               # a name the kernel assigns hides a module-level one
            return None
        if node.id in ck.scope and not isinstance(ck.scope[node.id], types.ModuleType):
            return ck.scope[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = ck.scope.get(node.value.id)
        if isinstance(module, types.ModuleType):
            value = getattr(module, node.attr, None)
            if value is not None and not callable(value) or isinstance(value, DType):
                return value
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD:
        a, b = static_value(ck, node.left), static_value(ck, node.right)
        if type(a) is int and type(b) is int and not (isinstance(node.op, ast.FloorDiv) and b == 0):
            return _FOLD[type(node.op)](a, b)
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = static_value(ck, node.operand)
        return -v if isinstance(v, int) else None
    return None

def static_int(ck, node, what):
    """An int known at compile time: a literal, a module-level int, or a Const parameter's name."""
    v = static_value(ck, node)
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ck.err(node, f"{what} must be a compile-time int (a literal, a module-level int or a "
                             "simt.Const[int] parameter)")
    if isinstance(v, str) and ck.params[v].dtype is not int:
        raise ck.err(node, f"{what}: `{v}` is not a simt.Const[int]")
    return v
