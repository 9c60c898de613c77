"""Kernel preconditions such as "dim(x, 0) % 64 == 0", parsed once and checked per launch."""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

from ..errors import KernelError, LaunchError

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


@dataclass(frozen=True)
class Precondition:
    text: str
    tree: ast.expr

    @staticmethod
    def parse(text: str, params: set[str], loc) -> "Precondition":
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            raise KernelError(f"precondition {text!r} is not a valid expression", loc) from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in params and node.id != "dim":
                raise KernelError(f"precondition {text!r} names `{node.id}`, which is not a parameter", loc,
                                  help="preconditions use parameters, numbers and dim(tensor, axis)")
            if not isinstance(node, (ast.Expression, ast.Name, ast.Constant, ast.BinOp, ast.Compare, ast.BoolOp,
                                     ast.UnaryOp, ast.Call, ast.Load, ast.And, ast.Or, ast.Not, ast.USub,
                                     *_BIN, *_CMP)):
                raise KernelError(f"precondition {text!r} uses unsupported syntax ({type(node).__name__})", loc)
        return Precondition(text, tree)

    def check(self, lookup, kernel_name: str) -> None:
        """`lookup(name)` gives a scalar; `lookup(("dim", name, axis))` an extent."""
        if not self._eval(self.tree, lookup):
            detail = ", ".join(f"{ast.unparse(n)} = {self._eval(n, lookup)}" for n in ast.walk(self.tree)
                               if isinstance(n, (ast.Call, ast.Name)) and not (isinstance(n, ast.Name) and n.id == "dim")
                               and not _inside_call(n, self.tree))
            raise LaunchError(f"precondition `{self.text}` of `{kernel_name}` does not hold ({detail})",
                              help="pass arguments that satisfy it (pad the tensor, or pick a fitting tile)")

    def _eval(self, node, lookup):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return lookup(node.id)
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == "dim" and len(node.args) == 2
                    and isinstance(node.args[0], ast.Name)):
                raise LaunchError(f"precondition `{self.text}`: only dim(tensor, axis) can be called")
            return lookup(("dim", node.args[0].id, self._eval(node.args[1], lookup)))
        if isinstance(node, ast.BinOp):
            return _BIN[type(node.op)](self._eval(node.left, lookup), self._eval(node.right, lookup))
        if isinstance(node, ast.UnaryOp):
            v = self._eval(node.operand, lookup)
            return -v if isinstance(node.op, ast.USub) else (not v)
        if isinstance(node, ast.BoolOp):
            vals = [self._eval(v, lookup) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, lookup)
            for op, right in zip(node.ops, node.comparators):
                r = self._eval(right, lookup)
                if not _CMP[type(op)](left, r):
                    return False
                left = r
            return True
        raise LaunchError(f"precondition `{self.text}` cannot be evaluated")


def _inside_call(n, tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and n in ast.walk(node) and n is not node:
            return True
    return False
