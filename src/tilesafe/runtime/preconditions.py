"""Kernel preconditions such as "dim(x, 0) % 64 == 0", parsed once and checked per launch.

A precondition computes with integers: parameters, numbers and `dim(tensor, axis)`. Its
shape is checked at definition (KernelError); what needs the arguments (a tensor used as a
number, an axis the tensor lacks, a division by zero) is a LaunchError at the launch.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

from ..errors import KernelError, LaunchError

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_WHAT = "preconditions use parameters, numbers and dim(tensor, axis)"


def written_at(src, text: str):
    """Where the precondition `text` is written: its string in `@ts.kernel(preconditions=[...])`,
    else that argument, else (no decorator in the source) the `def` line."""
    for deco in src.tree.decorator_list:
        for kw in deco.keywords if isinstance(deco, ast.Call) else ():
            if kw.arg != "preconditions":
                continue
            for elt in getattr(kw.value, "elts", ()):
                if isinstance(elt, ast.Constant) and elt.value == text:
                    return src.loc(elt)
            return src.loc(kw)
    return src.loc(src.tree)


@dataclass(frozen=True)
class Precondition:
    text: str
    tree: ast.expr

    @staticmethod
    def parse(text: str, params: set[str], loc) -> "Precondition":
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            raise KernelError(f"precondition {text!r} is not a valid expression", loc, help=_WHAT) from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in params and node.id != "dim":
                raise KernelError(f"precondition {text!r} names `{node.id}`, which is not a parameter", loc,
                                  help=_WHAT)
            if not isinstance(node, (ast.Expression, ast.Name, ast.Constant, ast.BinOp, ast.Compare, ast.BoolOp,
                                     ast.UnaryOp, ast.Call, ast.Load, ast.And, ast.Or, ast.Not, ast.USub,
                                     *_BIN, *_CMP)):
                raise KernelError(f"precondition {text!r} uses unsupported syntax ({type(node).__name__})", loc,
                                  help=_WHAT)
            if isinstance(node, ast.Call) and not _is_dim_call(node):
                raise KernelError(f"precondition {text!r}: only dim(tensor, axis) can be called", loc,
                                  help="write dim(x, 0) for the extent of tensor `x` along axis 0")
        return Precondition(text, tree)

    def check(self, lookup, kernel_name: str) -> None:
        """`lookup(name)` gives a scalar; `lookup(("dim", name, axis))` an extent."""
        ev = _Evaluator(self.text, kernel_name, lookup)
        try:
            if ev(self.tree):
                return
            detail = ", ".join(f"{ast.unparse(n)} = {ev(n)}" for n in _shown(self.tree))
        except (ArithmeticError, TypeError, ValueError) as e:   # e.g. `% 0`, or a dtype in arithmetic
            raise LaunchError(f"precondition `{self.text}` of `{kernel_name}` cannot be evaluated: {e}",
                              help="preconditions compute with integers; check the values this launch passes") \
                from None
        raise LaunchError(f"precondition `{self.text}` of `{kernel_name}` does not hold ({detail})",
                          help="pass arguments that satisfy it (pad the tensor, or pick a fitting tile)")


@dataclass(frozen=True)
class _Evaluator:
    """Evaluates a parsed precondition against one launch's arguments."""
    text: str
    kernel_name: str
    lookup: object

    def __call__(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._number(node.id)
        if isinstance(node, ast.Call):
            return self._dim(node.args[0].id, self(node.args[1]))
        if isinstance(node, ast.BinOp):
            return _BIN[type(node.op)](self(node.left), self(node.right))
        if isinstance(node, ast.UnaryOp):
            v = self(node.operand)
            return -v if isinstance(node.op, ast.USub) else (not v)
        if isinstance(node, ast.BoolOp):
            vals = [self(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = self(node.left)
            for op, right in zip(node.ops, node.comparators):
                r = self(right)
                if not _CMP[type(op)](left, r):
                    return False
                left = r
            return True
        raise LaunchError(f"precondition `{self.text}` cannot be evaluated", help=_WHAT)

    def _error(self, what: str, help: str) -> LaunchError:
        return LaunchError(f"precondition `{self.text}` of `{self.kernel_name}` {what}", help=help)

    def _number(self, name: str):
        try:
            return self.lookup(name)
        except KeyError:   # neither a runtime scalar nor a Const: a tensor parameter
            raise self._error(f"uses the tensor `{name}` as a number",
                              help=f"use one of its extents, e.g. dim({name}, 0)") from None

    def _dim(self, name: str, axis):
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise self._error(f"takes dim() of `{name}` along {axis!r}; an axis is an integer",
                              help=f"write dim({name}, 0) for its extent along axis 0")
        try:
            return self.lookup(("dim", name, axis))
        except LaunchError:    # the lookup refuses dim() of a name that is not a tensor
            if not self._is_number(name):
                raise
            raise self._error(f"takes dim() of `{name}`, which is not a tensor",
                              help=f"use `{name}` itself, or dim(x, axis) of a tensor parameter x") from None
        except IndexError:
            rank = self._rank(name)
            axes = f"axes 0 to {rank - 1}" if rank else "no axes"
            raise self._error(f"takes dim({name}, {axis}), but `{name}` has rank {rank} ({axes})",
                              help=f"name an axis below {rank}, or pass a tensor of the rank the kernel "
                                   "expects") from None

    def _is_number(self, name: str) -> bool:
        try:
            self.lookup(name)
        except KeyError:
            return False
        return True

    def _rank(self, name: str) -> int:
        rank = 0
        while True:
            try:
                self.lookup(("dim", name, rank))
            except IndexError:
                return rank
            rank += 1


def _is_dim_call(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id == "dim" and len(node.args) == 2
            and not node.keywords and isinstance(node.args[0], ast.Name))


def _shown(tree):
    """The parameters and dim() calls a failed precondition reports, with their values."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.Call, ast.Name)) and not (isinstance(n, ast.Name) and n.id == "dim") \
                and not _inside_call(n, tree):
            yield n


def _inside_call(n, tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and n in ast.walk(node) and n is not node:
            return True
    return False
