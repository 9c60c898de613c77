"""Static ranges of index expressions, to prove shared-memory reads in bounds.

Shared arrays have static shapes, so `s[ty, kk]` needs no run-time check when `ty` is a
thread index below the block size and `kk` a `range(T)` loop variable below the extent. The
rules are few and exact: constants; thread, lane and warp indices (from the contract's block);
names assigned once in the kernel (or a range loop's variable with constant bounds) take their
value's range; a module-level int counts where no parameter or assigned name of the kernel
hides it; +, -, * and // by constants combine ranges; `a % b` (b a positive constant) is in
[0, b) whatever integer `a` is, as Python's % (and numba's: a negative remainder gets b added)
is (a float `a` could round to b, but numba types no float index, and the CPU executor checks
every read). Anything else is unknown, and the read is checked at run time instead.

A range is computed with Python's ints but the GPU computes in int32 where both operands are
(thread indices are), so a range that leaves int32 at any step is unknown too: no step of a
proven index wraps (a wrapped product could be negative, and a proven read has no wraparound).
"""
from __future__ import annotations

import ast

INT32 = (-2 ** 31, 2 ** 31 - 1)


class StaticBounds:
    def __init__(self, tree, contract, resolve, scope):
        self.block = tuple(contract.block) + (1,) * (3 - len(contract.block))
        self.threads = contract.threads
        self.resolve, self.scope = resolve, scope
        stores: dict = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stores[node.id] = stores.get(node.id, 0) + 1
        # the kernel's own names hide module-level ints (the lowering makes literals of the others only)
        self.own = set(stores) | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
        # a name bound once, or only by loops over the same range (`for j in range(K)` in two passes)
        bound: dict = {}
        for node in ast.walk(tree):
            for name, value in _bindings(node):
                bound.setdefault(name, []).append(value)
        self.sources: dict = {}
        for name, values in bound.items():
            if stores.get(name) == 1 or stores.get(name) == len(values) and all(isinstance(v, Span) for v in values) \
                    and len({ast.dump(ast.Tuple([v.start, v.stop], ast.Load())) for v in values}) == 1:
                self.sources[name] = values[0]

    def range_of(self, e, depth=0):
        """(lo, hi) inclusive, or None when unknown or not within int32."""
        r = self._range(e, depth)
        return r if r is None or INT32[0] <= r[0] and r[1] <= INT32[1] else None

    def _range(self, e, depth):
        if depth > 20:
            return None
        if isinstance(e, ast.Constant) and type(e.value) is int:
            return (e.value, e.value)
        if isinstance(e, ast.Name) and e.id in self.sources:
            return self.range_of(self.sources[e.id], depth + 1)
        if isinstance(e, ast.Name) and e.id not in self.own and type(self.scope.get(e.id)) is int:
            return (self.scope[e.id], self.scope[e.id])
        if isinstance(e, Span):
            a, b = self.range_of(e.start, depth + 1), self.range_of(e.stop, depth + 1)
            return None if a is None or b is None else (a[0], b[1] - 1)
        if isinstance(e, ast.Call):
            return self.device(e)
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mod):    # Python's %: in [0, b) for any a, b > 0
            b = self.range_of(e.right, depth + 1)
            return (0, b[0] - 1) if b is not None and b[0] == b[1] and b[0] > 0 else None
        if isinstance(e, ast.BinOp):
            a, b = self.range_of(e.left, depth + 1), self.range_of(e.right, depth + 1)
            if a is None or b is None:
                return None
            if isinstance(e.op, ast.Add):
                return (a[0] + b[0], a[1] + b[1])
            if isinstance(e.op, ast.Sub):
                return (a[0] - b[1], a[1] - b[0])
            if isinstance(e.op, ast.Mult) and a[0] >= 0 and b[0] >= 0:
                return (a[0] * b[0], a[1] * b[1])
            if isinstance(e.op, ast.FloorDiv) and a[0] >= 0 and b[0] == b[1] and b[0] > 0:
                return (a[0] // b[0], a[1] // b[0])
        return None

    def device(self, call):
        op = self.resolve(call.func)
        if op == "thread_id":
            axis = self.range_of(call.args[0]) if call.args else (0, 0)     # a literal or a module-level int
            return (0, self.block[axis[0]] - 1) if axis is not None and axis[0] == axis[1] in (0, 1, 2) else None
        if op == "lane":
            return (0, 31)
        if op == "warp_id":
            return (0, max(0, self.threads // 32 - 1))
        return None


def _bindings(node):
    """(name, value expression) pairs a statement binds; a range loop binds its variable's span."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        t, v = node.targets[0], node.value
        if isinstance(t, ast.Name):
            return [(t.id, v)]
        if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
            return [(a.id, b) for a, b in zip(t.elts, v.elts) if isinstance(a, ast.Name)]
    if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call) \
            and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range" and len(node.iter.args) <= 2:
        args = node.iter.args
        start = args[0] if len(args) == 2 else ast.Constant(0)
        stop = args[-1]
        return [(node.target.id, Span(start, stop))]
    return []


class Span(ast.expr):
    """range(start, stop)'s values, as an expression node the evaluator understands."""
    _fields = ("start", "stop")
