"""Inlining of `@ts.function` helpers: their body is lowered in the caller's builder."""
from __future__ import annotations

import ast
import inspect

from .builder import Builder
from .objects import DeviceFunction
from .source import KernelSource

MAX_DEPTH = 32


class ReturnValue(Exception):
    """Carries a @ts.function's return value out of its body."""

    def __init__(self, value):
        self.value = value


def inline_call(b: Builder, node, fn: DeviceFunction, args, kwargs):
    try:
        bound = inspect.signature(fn.fn).bind(*args, **kwargs)
    except TypeError as e:
        raise b.error(node, f"bad arguments to `{fn.fn.__name__}`: {e}") from None
    bound.apply_defaults()
    src = KernelSource.of(fn.fn)
    body = src.tree.body
    for i, stmt in enumerate(body):
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Return) and not (sub is stmt and i == len(body) - 1):
                raise src.error(sub, f"`{fn.fn.__name__}` returns before its end; a @ts.function has one "
                                     "`return`, as its last statement")
    if b.inline_depth >= MAX_DEPTH:
        raise b.error(node, f"`{fn.fn.__name__}` is inlined too deeply (recursion is not supported)")
    saved = (b.src, b.scope, b.env, b.loc)
    b.src, b.scope, b.env = src, src.globals_and_closure(), dict(bound.arguments)
    b.inline_depth += 1
    try:
        b.lower_body(body)
        return None
    except ReturnValue as r:
        return r.value
    finally:
        b.src, b.scope, b.env, b.loc = saved
        b.inline_depth -= 1
