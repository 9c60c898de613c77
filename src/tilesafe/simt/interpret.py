"""The CPU executor's front half: a kernel's body, rewritten into a per-thread generator.

Each thread of a block runs the kernel as a Python generator. Synchronisation points
(`simt.barrier()`, warp operations) become `yield`s, so the scheduler (cpu_executor.py) can
run a block phase by phase; every memory access becomes a call on the thread's context `__t`,
which checks it (the sanitizer). Line numbers are kept, so a Python error in the kernel
points at the user's line.
"""
from __future__ import annotations

import ast
import copy

from . import stubs
from .kernel_info import node_key, resolve_op


def thread_function(src, info, params, scope):
    """A generator function `(__t, *params) -> events` running one thread of the kernel."""
    tree = copy.deepcopy(src.tree)
    tree.decorator_list = []
    locs: list = []
    rewritten = _Rewrite(src, info, {p.name: p for p in params}, scope, locs).visit(tree)
    rewritten.name = "__simt_thread"
    rewritten.decorator_list = []
    rewritten.returns = None
    for a in rewritten.args.args + rewritten.args.kwonlyargs:
        a.annotation = None
    rewritten.args.defaults, rewritten.args.kw_defaults = [], [None] * len(rewritten.args.kwonlyargs)
    rewritten.args.args.insert(0, ast.arg("__t"))
    never = ast.If(test=ast.Constant(False), body=[ast.Expr(ast.Yield(None))], orelse=[])
    rewritten.body.append(never)     # a generator even without synchronisation points
    module = ast.Module(body=[rewritten], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, src.line_offset)
    namespace = dict(scope)
    namespace["__locs"] = locs
    namespace["__walks"] = info.walks
    exec(compile(module, src.file, "exec"), namespace)
    return namespace["__simt_thread"]


def _call(obj, method, args):
    return ast.Call(func=ast.Attribute(value=ast.Name(obj, ast.Load()), attr=method, ctx=ast.Load()),
                    args=args, keywords=[])


class _Rewrite(ast.NodeTransformer):
    def __init__(self, src, info, params, scope, locs):
        self.src, self.info, self.params, self.scope, self.locs = src, info, params, scope, locs
        self.walks = {node_key(w.node): i for i, w in enumerate(info.walks)}

    def loc(self, node):
        self.locs.append(self.src.loc(node))
        return ast.Subscript(value=ast.Name("__locs", ast.Load()), slice=ast.Constant(len(self.locs) - 1),
                             ctx=ast.Load())

    def tensorish(self, name) -> bool:
        return name in self.params and self.params[name].is_tensor or name in self.info.shared \
            or name in self.info.tables

    def visit_Expr(self, node):
        v = node.value
        if isinstance(v, ast.Call) and resolve_op(v.func, self.scope) == "barrier":
            return ast.copy_location(ast.Expr(ast.Yield(ast.Tuple([ast.Constant("barrier"), self.loc(v)],
                                                                   ast.Load()))), node)
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and isinstance(v.func.value, ast.Name) \
                and (v.func.value.id in self.params or v.func.value.id in self.info.shared) \
                and v.func.attr in ("add", "max", "min"):
            args = [self.visit(a) for a in v.args]
            call = _call("__t", "atomic", [v.func.value, ast.Constant(v.func.attr), *args, self.loc(v)])
            return ast.copy_location(ast.Expr(call), node)
        return self.generic_visit(node)

    def visit_Assign(self, node):
        target = node.targets[0]
        if isinstance(target, ast.Subscript):
            value = self.visit(node.value)
            call = _call("__t", "write", [ast.Name(target.value.id, ast.Load()), self.visit(target.slice), value,
                                          self.loc(target)])
            return ast.copy_location(ast.Expr(call), node)
        value = node.value
        if isinstance(value, ast.Call) and resolve_op(value.func, self.scope) == "shared":
            node.value = _call("__t", "shared", [*value.args, self.loc(value), ast.Constant(target.id)])
            return node
        return self.generic_visit(node)

    def visit_For(self, node):
        key = node_key(node)
        if key in self.walks:
            target = node.iter.func.value
            walk = ast.Subscript(value=ast.Name("__walks", ast.Load()), slice=ast.Constant(self.walks[key]),
                                 ctx=ast.Load())
            node.iter = _call("__t", "permits", [ast.Name(target.id, ast.Load()), walk])
            node.body = [self.visit(s) for s in node.body]
            return node
        return self.generic_visit(node)

    def visit_Subscript(self, node):
        base = node.value
        if isinstance(base, ast.Name) and self.tensorish(base.id) and isinstance(node.ctx, ast.Load):
            return ast.copy_location(_call("__t", "read", [base, self.visit(node.slice), self.loc(node)]), node)
        return self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        op = resolve_op(f, self.scope)
        args = [self.visit(a) for a in node.args]
        if op in stubs.WARP_OPS:
            return ast.copy_location(ast.Yield(ast.Tuple([ast.Constant("warp"), ast.Constant(op), self.loc(node),
                                                          *args], ast.Load())), node)
        if op in stubs.DEVICE:
            return ast.copy_location(_call("__t", op, args), node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr == "run" \
                and f.value.id in self.params:
            return ast.copy_location(_call("__t", "read_run", [f.value, *args, self.loc(node)]), node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr == "get" \
                and self.tensorish(f.value.id):
            return ast.copy_location(_call("__t", "get", [f.value, *args, self.loc(node)]), node)
        node.args = args
        return node
