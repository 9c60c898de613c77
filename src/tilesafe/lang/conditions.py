"""The expressions of bounds conditions (S11), evaluated at analysis and at every launch.

An expression is a nested tuple: ("const", v), the leaves ("extent", tensor, axis),
("scalar", name) and ("grid", axis) that a launch's facts answer, and (op, a, b) for op in
add sub mul floordiv cdiv min max le ge and. Values are exact Python ints; a grid of any size
is `inf`, and what cannot be known (a quotient of inf, a division by zero) is NaN, with which
every comparison is false. `and` evaluates left to right and stops at the first false operand.

`evaluate` walks an expression (analysis time). `compile_condition` turns one into a Python
function of the facts, made once per specialization: a launch that re-decides its masks
calls it instead of walking the tree, the only per-launch cost of a bounds proof.
"""
from __future__ import annotations

import math
import operator


def evaluate(expr, facts):
    """The value of `expr`; `facts` answers extent/scalar/grid leaves."""
    tag = expr[0]
    if tag == "const":
        return expr[1]
    if tag == "extent":
        return facts.extent(expr[1], expr[2])
    if tag == "scalar":
        return facts.scalar(expr[1])
    if tag == "grid":
        return facts.grid(expr[1])
    if tag == "and":
        return bool(evaluate(expr[1], facts)) and bool(evaluate(expr[2], facts))
    return _BINARY[tag](evaluate(expr[1], facts), evaluate(expr[2], facts))


def compile_condition(expr):
    """`expr` as a function `f(facts) -> value` equal to `evaluate(expr, facts)`."""
    leaves: dict[tuple, str] = {}
    body = _source(expr, leaves)
    lines = [f"    {name} = F.{leaf[0]}({', '.join(map(repr, leaf[1:]))})" for leaf, name in leaves.items()]
    src = "def condition(F):\n" + "\n".join(lines + [f"    return {body}"]) + "\n"
    namespace = dict(_HELPERS)
    try:
        exec(compile(src, "<bounds condition>", "exec"), namespace)   # noqa: S102 (our own tuples)
    except (RecursionError, MemoryError, SyntaxError):   # a huge expression: walk it instead
        return lambda facts: evaluate(expr, facts)
    return namespace["condition"]


def _source(expr, leaves: dict) -> str:
    tag = expr[0]
    if tag == "const":
        v = expr[1]
        return repr(v) if isinstance(v, (bool, int)) else f"_const({str(float(v))!r})"   # inf, nan
    if tag in ("extent", "scalar", "grid"):
        return leaves.setdefault(expr, f"v{len(leaves)}")
    a, b = _source(expr[1], leaves), _source(expr[2], leaves)
    if tag == "and":
        return f"(bool({a}) and bool({b}))"
    if tag in _NATIVE:   # NaN propagates through these and fails these comparisons natively
        return f"({a} {_NATIVE[tag]} {b})"
    return f"_{tag}({a}, {b})"


def _unknown(a, b) -> bool:
    return a != a or b != b


def _no_quotient(a, b) -> bool:
    """A quotient nothing is known about: of NaN, by zero, or of an unbounded (inf) value."""
    return _unknown(a, b) or b == 0 or abs(a) == math.inf or abs(b) == math.inf


def _floordiv(a, b):
    return math.nan if _no_quotient(a, b) else a // b


def _cdiv(a, b):
    return math.nan if _no_quotient(a, b) else -(-a // b)


def _min(a, b):   # the builtin's answer with a NaN depends on the operands' order
    return math.nan if _unknown(a, b) else min(a, b)


def _max(a, b):
    return math.nan if _unknown(a, b) else max(a, b)


# +, -, * give NaN for a NaN operand (and for inf - inf, inf * 0), and <=, >= are false with
# one: Python's operators already behave as the rules above say.
_NATIVE = {"add": "+", "sub": "-", "mul": "*", "le": "<=", "ge": ">="}
_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "le": operator.le, "ge": operator.ge,
           "floordiv": _floordiv, "cdiv": _cdiv, "min": _min, "max": _max}
_HELPERS = {f"_{tag}": _BINARY[tag] for tag in _BINARY if tag not in _NATIVE} | {"_const": float}
