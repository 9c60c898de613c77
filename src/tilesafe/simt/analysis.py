"""Definition-time analysis of a SIMT kernel: the rules a kernel's code must follow.

One walk over the AST checks, at the user's source line:
- writes: an output (`simt.Disjoint`) or shared array is written only as `t[p] = v` where `p`
  is the loop variable of a live `for p in t.permits(mapping):` walk over that same `t`; a
  `simt.Ref` is never written; a `simt.Atomic` takes `add`/`max`/`min` only;
- permits: used only as an index (`t[p]`, `x[p]`) or for a coordinate (`p[0]`), never copied,
  stored, returned, passed to a call or used after their loop; walks do not nest;
- divergence: every value and every control-flow point has a level, block-uniform <
  warp-uniform < varying. `simt.barrier()` needs block-uniform control flow, warp operations
  at most warp-uniform (and a block size that is a multiple of 32). Levels are computed to a
  fixed point first (a loop can carry a varying value back to its top), then checked;
- reads: `x[i]` of a Ref or shared array is proven in bounds when `i` is a permit of a walk
  whose extents match by name (as S11), otherwise checked at run time.
The result (`KernelInfo`) is what the CPU executor and the numba lowering read.
"""
from __future__ import annotations

import ast
import builtins
import math

from ..dtypes import DType
from . import stubs
from .constant import Table
from .kernel_info import KernelInfo, SharedDecl, Walk, node_key, resolve_op
from .mapping_syntax import walk_of
from .params import ATOMIC, DISJOINT, KIND_NAMES, REF, SCALAR
from .read_proofs import proven
from .static_bounds import StaticBounds
from .static_values import static_int, static_value

UNIFORM, WARP, VARYING = 0, 1, 2
_BUILTINS = {"min", "max", "abs", "int", "float", "bool", "range", "len"}
_ATOMIC_OPS = {"add", "max", "min"}


def analyse(src, params, contract, scope, unsafe=False) -> KernelInfo:
    """Check the kernel's body; raises KernelError at the first broken rule. `unsafe`: outputs
    may also be written at computed indices and take atomics (checked at run time instead)."""
    levels: dict = {}
    while True:                                   # levels only grow: iterate to a fixed point
        before = dict(levels)
        _Checker(src, params, contract, scope, levels, final=False, unsafe=unsafe).run()
        if levels == before:
            break
    checker = _Checker(src, params, contract, scope, levels, final=True, unsafe=unsafe)
    checker.run()
    return checker.info


class _Checker:
    def __init__(self, src, params, contract, scope, levels, final, unsafe):
        self.src, self.contract, self.scope, self.levels, self.final = src, contract, scope, levels, final
        self.unsafe = unsafe
        self.params = {p.name: p for p in params}
        self.info = KernelInfo()
        self.live: dict = {}       # permit name -> Walk
        self.dead: dict = {}       # permit name -> its ended Walk
        self.control = [(UNIFORM, None)]   # (level, node) of each enclosing control-flow point
        self.walked: set = set()
        self.in_walk: Walk | None = None
        self.unpacked_runs: set = set()   # the x.run(i, k) calls unpacked by an assignment
        self.bounds = StaticBounds(src.tree, contract, lambda f: resolve_op(f, scope), scope)
        self.own = self.bounds.own        # the kernel's own names (static_values.py)

    def err(self, node, message, help=None):
        return self.src.error(node, message, help or "docs/simt.md lists what a SIMT kernel may do")

    def run(self):
        for stmt in self.src.tree.body:
            self.stmt(stmt, top=True)

    # -- control ----------------------------------------------------------------------------------
    def level_here(self):
        return max(level for level, _ in self.control)

    def diverging_node(self, above: int):
        for level, node in self.control:
            if level > above:
                return node
        return None

    def under(self, level, node, body):
        self.control.append((level, node))
        try:
            for s in body:
                self.stmt(s)
        finally:
            self.control.pop()

    def note(self, name, level):
        self.levels[name] = max(self.levels.get(name, UNIFORM), level, self.level_here())

    # -- statements ---------------------------------------------------------------------------------
    def stmt(self, s, top=False):
        handler = getattr(self, "s_" + type(s).__name__, None)
        if handler is None:
            raise self.err(s, f"`{type(s).__name__}` statements are not supported in SIMT kernels",
                           help="use assignments, if/else, while and for loops over range(...) or permits")
        handler(s, top) if type(s).__name__ in ("Assign", "AnnAssign") else handler(s)

    def s_Pass(self, s):
        pass

    def s_Expr(self, s):
        v = s.value
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return   # a docstring
        if isinstance(v, ast.Call):
            op = resolve_op(v.func, self.scope)
            if op == "barrier":
                return self.barrier(v)
            if isinstance(v.func, ast.Attribute) and isinstance(v.func.value, ast.Name) \
                    and v.func.value.id in self.params and self.params[v.func.value.id].is_tensor:
                return self.atomic(v)
            if isinstance(v.func, ast.Attribute) and isinstance(v.func.value, ast.Name) \
                    and self.table(v.func.value.id) is not None:
                raise self.err(v, f"constant table `{v.func.value.id}` is read-only: it takes no atomics",
                               help="accumulate in a simt.Atomic[dtype, shape] parameter")
            if isinstance(v.func, ast.Attribute) and isinstance(v.func.value, ast.Name) \
                    and v.func.value.id in self.info.shared and v.func.attr in _ATOMIC_OPS:
                return self.shared_atomic(v)
        self.expr(v)

    def barrier(self, call):
        if call.args or call.keywords:
            raise self.err(call, "simt.barrier() takes no arguments")
        if self.in_walk is not None:
            raise self.err(call, "simt.barrier() inside a permits walk: threads without a permit skip the walk "
                                 "and would never reach it",
                           help="end the walk first; every thread then reaches the barrier")
        node = self.diverging_node(UNIFORM)
        if node is not None and self.final:
            raise self.err(call, f"simt.barrier() under thread-dependent control flow (line "
                                 f"{self.src.loc(node).line}): threads that skip it would deadlock the block",
                           help="move the barrier out of the branch or loop whose condition depends on the thread")

    def atomic(self, call):
        name = call.func.value.id
        p = self.params[name]
        if p.kind == DISJOINT and self.unsafe:
            self.info.raw_atomic_targets.add(name)      # a raw atomic: an unsafe kernel's own responsibility
        elif p.kind != ATOMIC:
            what = "a read-only input (simt.Ref)" if p.kind == REF else f"a {KIND_NAMES.get(p.kind, 'scalar')}"
            raise self.err(call, f"cannot use atomics on `{name}`: it is {what}",
                           help="atomic accumulation targets are parameters annotated simt.Atomic[dtype, shape]")
        if call.func.attr not in _ATOMIC_OPS:
            raise self.err(call, f"`{name}` is an atomic target: it takes {name}.add/max/min(i, value) only")
        if len(call.args) != 2 or call.keywords:
            raise self.err(call, f"{name}.{call.func.attr}(index, value) takes two arguments")
        if len(p.shape) != 1:
            raise self.err(call, f"atomics on `{name}` need a rank-1 target (it has rank {len(p.shape)})")
        self.index_expr(call.args[0])
        self.expr(call.args[1])
        self.info.atomics.append(call)

    def shared_atomic(self, call):
        """`s.add(i, v)` on a rank-1 shared array: atomics commute, so any thread may update any
        element; shared_phases.py keeps them in a phase of their own, between barriers."""
        name = call.func.value.id
        if len(call.args) != 2 or call.keywords:
            raise self.err(call, f"{name}.{call.func.attr}(index, value) takes two arguments")
        if len(self.info.shared[name].shape) != 1:
            raise self.err(call, f"atomics on shared array `{name}` need rank 1 (it has rank "
                                 f"{len(self.info.shared[name].shape)})")
        self.index_expr(call.args[0])
        self.expr(call.args[1])
        self.info.atomics.append(call)

    def s_Assign(self, s, top=False):
        if len(s.targets) != 1:
            raise self.err(s, "assign one target at a time in SIMT kernels")
        self.assign(s, s.targets[0], s.value, top)

    def s_AnnAssign(self, s, top=False):
        if s.value is None:
            raise self.err(s, "a declaration without a value is not supported")
        self.assign(s, s.target, s.value, top)

    def assign(self, s, target, value, top):
        if isinstance(target, ast.Subscript):
            return self.store(s, target, value)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts) \
                and all(isinstance(t, ast.Name) for t in target.elts):
            for t, v in zip(target.elts, value.elts):      # a, b = x, y: pairwise
                self.assign(s, t, v, False)
            return
        if isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts) \
                and self.is_run_read(value):                # a, b, c, d = x.run(i, 4)
            k = static_value(self, value.args[1])
            if isinstance(k, int) and k != len(target.elts):
                raise self.err(target, f"`{ast.unparse(value)}` gives {k} values, unpacked into {len(target.elts)}")
            self.unpacked_runs.add(id(value))
            level = self.expr(value)
            for t in target.elts:
                self.check_rebind(t, t.id)
                self.note(t.id, level)
            return
        if not isinstance(target, ast.Name):
            raise self.err(target, "assign to a plain name, or write `out[p] = value` through a permit")
        name = target.id
        self.check_rebind(target, name)
        op = resolve_op(value.func, self.scope) if isinstance(value, ast.Call) else None
        if op == "shared":
            return self.declare_shared(s, name, value, top)
        if isinstance(value, ast.Name) and (value.id in self.live or value.id in self.dead):
            raise self.err(value, f"a permit cannot be copied into `{name}`: it is valid only as its own "
                                  "loop's variable", help=f"index with `{value.id}` directly inside its loop")
        self.note(name, self.expr(value))

    def check_rebind(self, node, name):
        if name in self.params:
            raise self.err(node, f"cannot assign to parameter `{name}` in a SIMT kernel",
                           help="use a new local name")
        if name in self.live or name in self.dead:
            raise self.err(node, f"cannot assign to permit `{name}`", help="permits are minted by the walk only")
        if name in self.info.shared:
            raise self.err(node, f"cannot rebind shared array `{name}`")

    def s_AugAssign(self, s):
        if not isinstance(s.target, ast.Name):
            raise self.err(s.target, "augmented assignment is for local names; write `t[p] = value` "
                                     "through a permit")
        self.check_rebind(s.target, s.target.id)
        self.note(s.target.id, max(self.expr(s.value), self.levels.get(s.target.id, UNIFORM)))

    def declare_shared(self, s, name, call, top):
        if not top:
            raise self.err(s, f"declare shared array `{name}` at the kernel's top level",
                           help="shared memory is per block; declare it once, outside loops and branches")
        if len(call.args) != 2 or call.keywords:
            raise self.err(call, "simt.shared(shape, dtype) takes a shape and a dtype")
        shape_node, dtype_node = call.args
        items = shape_node.elts if isinstance(shape_node, ast.Tuple) else [shape_node]
        dtype = static_value(self, dtype_node)
        if not isinstance(dtype, DType):
            raise self.err(dtype_node, "simt.shared's dtype must be a tilesafe dtype such as ts.f32")
        runtime = [e for e in items if isinstance(e, ast.Name) and e.id in self.params
                   and self.params[e.id].kind == SCALAR and self.params[e.id].dtype is int]
        if runtime:
            return self.declare_dynamic(s, name, items, runtime[0], dtype)
        shape = tuple(static_int(self, e, "a shared array's shape") for e in items)
        self.info.shared[name] = SharedDecl(name, shape, dtype, s)

    def declare_dynamic(self, s, name, items, size, dtype):
        """`simt.shared((n,), dtype)` with `n: int` a launch-time value: CUDA's dynamic shared memory,
        one array per kernel, rank 1 (numba gives every dynamic array the same base address)."""
        if len(items) != 1:
            raise self.err(size, f"dynamic shared array `{name}` (sized by the launch-time `{size.id}`) must have "
                                 "rank 1", help="index a rank-1 array as s[i * width + j], or size it with "
                                                "simt.Const[int] values")
        other = next((d for d in self.info.shared.values() if d.dynamic and d.name != name), None)
        if other is not None:
            raise self.err(s, f"a kernel has one dynamic shared array; `{other.name}` (line "
                              f"{self.src.loc(other.node).line}) is one already",
                           help="put both in one array, or size one with simt.Const[int] values")
        self.info.shared[name] = SharedDecl(name, (size.id,), dtype, s, dynamic=True)

    def store(self, s, target, value):
        base = target.value
        if not isinstance(base, ast.Name):
            raise self.err(target, "write outputs as `out[p] = value` with a permit `p`")
        name = base.id
        if name in self.params:
            kind = self.params[name].kind
            if kind == REF:
                raise self.err(target, f"cannot write `{name}`: it is a read-only input (simt.Ref)",
                               help="write results through a simt.Disjoint output's permits")
            if kind == ATOMIC:
                raise self.err(target, f"cannot write `{name}` by index: it is an atomic target (simt.Atomic)",
                               help=f"use {name}.add(i, value), {name}.max(...) or {name}.min(...)")
            if kind != DISJOINT:
                raise self.err(target, f"cannot write `{name}`: it is not a tensor")
        elif self.table(name) is not None:
            raise self.err(target, f"cannot write `{name}`: it is a constant table (constant memory), read-only",
                           help="write results through a simt.Disjoint output's permits")
        elif name not in self.info.shared:
            raise self.err(target, f"cannot write into `{name}`: only outputs and shared arrays are written by index")
        index = target.slice
        is_permit = isinstance(index, ast.Name) and (index.id in self.live or index.id in self.dead)
        if not is_permit and self.unsafe and name in self.params:
            self.index_expr(index, len(self.params[name].shape))
            self.info.raw_stores.add(node_key(target))   # checked at run time, its writes recorded
            self.info.raw_store_targets.add(name)
            self.expr(value)
            return
        if not is_permit:
            raise self.err(target, f"cannot write `{name}` through a computed index: outputs are written only "
                                   "through a permit",
                           help=f"write inside `for p in {name}.permits(simt.per_thread()):` as `{name}[p] = ...`")
        if index.id in self.dead:
            raise self.err(index, f"permit `{index.id}` is used after its loop ended",
                           help="permits are valid only inside their own loop")
        walk = self.live[index.id]
        if walk.target != name:
            raise self.err(target, f"permit `{index.id}` belongs to `{walk.target}`, not `{name}`",
                           help=f"walk `{name}.permits(...)` to write `{name}`")
        self.expr(value)

    def s_If(self, s):
        level = self.expr(s.test)
        self.under(level, s, s.body)
        self.under(level, s, s.orelse)

    def s_While(self, s):
        if s.orelse:
            raise self.err(s, "while/else is not supported")
        level = max(self.expr(s.test), self.loop_exit_level(s))
        self.under(level, s, s.body)
        level = max(level, self.expr(s.test))
        self.under(level, s, s.body)

    def loop_exit_level(self, loop):
        """A loop with break/continue is treated as thread-dependent: its trip count may differ."""
        for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
            if isinstance(node, (ast.Break, ast.Continue)):
                return VARYING
        return UNIFORM

    def s_Break(self, s):
        pass

    def s_Continue(self, s):
        pass

    def s_Return(self, s):
        raise self.err(s, "SIMT kernels do not return: every thread must reach every barrier",
                       help="guard the work with `if` instead")

    def s_For(self, s):
        if s.orelse:
            raise self.err(s, "for/else is not supported in SIMT kernels")
        it = s.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "permits":
            return self.walk(s)
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and self.scope.get("range", range) is range):
            raise self.err(it, "SIMT loops run over range(...) or a permits walk (`for p in out.permits(...)`)")
        if not isinstance(s.target, ast.Name):
            raise self.err(s.target, "a range loop's variable is a plain name")
        self.check_rebind(s.target, s.target.id)
        if not 1 <= len(it.args) <= 3 or it.keywords:
            raise self.err(it, "range() takes 1 to 3 arguments")
        level = max([self.expr(a) for a in it.args] + [self.loop_exit_level(s)])
        self.note(s.target.id, level)
        self.under(level, s, s.body)

    def walk(self, s):
        call = s.iter
        owner = call.func.value
        if not isinstance(owner, ast.Name):
            raise self.err(call, "walk the permits of an output or shared array by name")
        name = owner.id
        if name in self.params:
            p = self.params[name]
            if p.kind != DISJOINT:
                what = "a read-only input (simt.Ref)" if p.kind == REF else KIND_NAMES.get(p.kind, "a scalar")
                raise self.err(call, f"`{name}` has no permits: it is {what}",
                               help="permits are minted for simt.Disjoint outputs and shared arrays")
            rank, shared = len(p.shape), False
        elif name in self.info.shared:
            rank, shared = len(self.info.shared[name].shape), True
        elif self.table(name) is not None:
            raise self.err(call, f"`{name}` has no permits: it is a constant table (read-only)",
                           help="permits are minted for simt.Disjoint outputs and shared arrays")
        else:
            raise self.err(call, f"`{name}` has no permits: only outputs and shared arrays do")
        if self.in_walk is not None:
            raise self.err(s, "permit walks do not nest", help="end the outer walk before starting another")
        if not shared and name in self.walked:
            raise self.err(s, f"`{name}` is walked twice: an output has one permits walk",
                           help="write all of its elements inside one walk")
        if not isinstance(s.target, ast.Name):
            raise self.err(s.target, "a permit is a single name: `for p in out.permits(...)`")
        if len(call.args) != 1 or call.keywords:
            raise self.err(call, f"{name}.permits(mapping) takes one mapping, e.g. simt.per_thread()")
        walk = walk_of(self, call.args[0], s, s.target.id, name, shared, rank)
        walk.unconditional = len(self.control) == 1 and any(
            isinstance(b, ast.Assign) and isinstance(b.targets[0], ast.Subscript)
            and isinstance(b.targets[0].value, ast.Name) and b.targets[0].value.id == name for b in s.body) \
            and not any(isinstance(n, (ast.Break, ast.Continue)) for b in s.body for n in ast.walk(b))
        self.dead.pop(s.target.id, None)     # a new walk mints new permits under a reused name
        self.check_rebind(s.target, s.target.id)
        self.walked.add(name)
        self.info.walks.append(walk)
        self.live[walk.permit] = walk
        self.in_walk = walk
        try:
            self.under(VARYING, s, s.body)
        finally:
            self.in_walk = None
            del self.live[walk.permit]
            self.dead[walk.permit] = walk

    # -- expressions: each returns its level --------------------------------------------------------
    def expr(self, e) -> int:
        handler = getattr(self, "e_" + type(e).__name__, None)
        if handler is None:
            raise self.err(e, f"`{ast.unparse(e)}` is not supported in SIMT kernels")
        return handler(e)

    def e_Constant(self, e):
        if not isinstance(e.value, (int, float, bool)):
            raise self.err(e, f"constant {e.value!r} is not a number")
        return UNIFORM

    def e_Name(self, e):
        name = e.id
        if name in self.live:
            raise self.err(e, f"permit `{name}` can only index its target or another tensor, or give a "
                              f"coordinate as `{name}[0]`", help="permits cannot be copied, stored or passed")
        if name in self.dead:
            raise self.err(e, f"permit `{name}` is used after its loop ended",
                           help="permits are valid only inside their own loop")
        if name in self.params:
            if self.params[name].is_tensor:
                raise self.err(e, f"tensor `{name}` cannot be used as a value", help=f"index it: `{name}[i]`")
            return UNIFORM
        if name in self.info.shared:
            raise self.err(e, f"shared array `{name}` cannot be used as a value",
                           help=f"index it (`{name}[i]`); shared memory is not a global tensor")
        if name in self.levels:
            return self.levels[name]
        if self.table(name) is not None:
            raise self.err(e, f"constant table `{name}` cannot be used as a value",
                           help=f"index it (`{name}[i]`); constant memory is not a global tensor")
        value = self.scope.get(name, getattr(builtins, name, None))
        if isinstance(value, (bool, int, float)):
            return UNIFORM
        if value is None and not self.final:
            return UNIFORM      # a local assigned later in the body; the fixed point settles it
        if value is None:
            raise self.err(e, f"name `{name}` is not defined in the kernel")
        raise self.err(e, f"kernel uses `{name}` ({type(value).__name__}) from outside: SIMT kernels capture only "
                          "numbers", help="pass tensors as parameters")

    def e_BinOp(self, e):
        return max(self.expr(e.left), self.expr(e.right))

    def e_UnaryOp(self, e):
        return self.expr(e.operand)

    def e_BoolOp(self, e):
        """`a and b`: `b` runs only where `a` allows, as if under `if a:`."""
        level = self.expr(e.values[0])
        for v in e.values[1:]:
            self.control.append((level, e))
            try:
                level = max(level, self.expr(v))
            finally:
                self.control.pop()
        return level

    def e_Compare(self, e):
        return max([self.expr(e.left)] + [self.expr(c) for c in e.comparators])

    def e_IfExp(self, e):
        """`a if t else b`: each branch runs only where `t` chooses it, as under `if t:`."""
        level = self.expr(e.test)
        self.control.append((level, e))
        try:
            return max(level, self.expr(e.body), self.expr(e.orelse))
        finally:
            self.control.pop()

    def e_Attribute(self, e):
        if isinstance(e.value, ast.Name) and self.scope.get(e.value.id) is math \
                and isinstance(getattr(math, e.attr, None), float):
            return UNIFORM       # math.inf, math.pi, ...
        raise self.err(e, f"`{ast.unparse(e)}` is not a value in a SIMT kernel")

    def e_Subscript(self, e):
        base = e.value
        if isinstance(base, ast.Attribute) and base.attr == "shape" and isinstance(base.value, ast.Name) \
                and (base.value.id in self.params and self.params[base.value.id].is_tensor
                     or base.value.id in self.info.shared or self.table(base.value.id) is not None):
            static_int(self, e.slice, "a shape axis")
            return UNIFORM
        if not isinstance(base, ast.Name):
            raise self.err(e, f"`{ast.unparse(e)}`: index tensors, shared arrays and permits by name")
        name = base.id
        if name in self.live or name in self.dead:
            if name in self.dead:
                raise self.err(base, f"permit `{name}` is used after its loop ended",
                               help="permits are valid only inside their own loop")
            axis = static_int(self, e.slice, "a permit coordinate")
            if not isinstance(axis, int) or not 0 <= axis < self.live[name].rank:
                raise self.err(e, f"permit `{name}` has {self.live[name].rank} coordinate(s)")
            return VARYING
        return self.read(e, name, e.slice)

    def read(self, node, name, index, default=None):
        if name in self.params:
            kind = self.params[name].kind
            if kind == DISJOINT:
                raise self.err(node, f"cannot read `{name}`: SIMT outputs (simt.Disjoint) are write-only",
                               help="compute the value in a local, or pass the data as a simt.Ref input")
            if kind == ATOMIC:
                raise self.err(node, f"cannot read `{name}`: it is an atomic target (add/max/min only)",
                               help="read the accumulated values after the launch, e.g. as a simt.Ref of the "
                                    "next kernel")
            if kind != REF:
                raise self.err(node, f"`{name}` is not a tensor")
            rank = len(self.params[name].shape)
        elif name in self.info.shared:
            rank = len(self.info.shared[name].shape)
        elif self.table(name) is not None:
            rank = len(self.table(name).shape)
            self.info.tables[name] = self.table(name)
        else:
            raise self.err(node, f"`{name}` is not a tensor or shared array")
        level = self.index_expr(index, rank)
        if default is not None:
            return max(level, self.expr(default))
        if proven(self, name, index, rank):
            self.info.proven.add(node_key(node))
        else:
            self.info.checked.append((name, node))
        return level

    def index_expr(self, index, rank=1) -> int:
        if isinstance(index, ast.Name) and index.id in self.live:
            if self.live[index.id].rank != rank:
                raise self.err(index, f"permit `{index.id}` has rank {self.live[index.id].rank}, the tensor {rank}")
            return VARYING
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        if len(items) != rank:
            raise self.err(index, f"index has {len(items)} coordinate(s), the tensor has rank {rank}")
        return max(self.expr(i) for i in items)

    def table(self, name):
        """The constant table `name` refers to, unless a parameter, local or shared array shadows it."""
        if name in self.params or name in self.levels or name in self.info.shared or name in self.live:
            return None
        value = self.scope.get(name)
        return value if isinstance(value, Table) else None

    def e_Call(self, e):
        op = resolve_op(e.func, self.scope)
        if op is not None:
            return self.device_call(e, op)
        f = e.func
        if self.is_run_read(e):
            if id(e) not in self.unpacked_runs:
                raise self.err(e, f"unpack `{ast.unparse(e)}` into names: `a, b, c, d = {ast.unparse(e)}`",
                               help="a run of values is not a value of its own")
            return self.read(e, f.value.id, e.args[0])
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr == "get":
            if len(e.args) != 2 or e.keywords:
                raise self.err(e, f"{f.value.id}.get(index, default) takes two arguments")
            return self.read(e, f.value.id, e.args[0], default=e.args[1])
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and self.scope.get(f.value.id) is math:
            return max([self.expr(a) for a in e.args] + [UNIFORM])
        if isinstance(f, ast.Name) and f.id in _BUILTINS - {"range", "len"} and f.id not in self.levels \
                and self.scope.get(f.id, getattr(builtins, f.id)) is getattr(builtins, f.id):
            return max([self.expr(a) for a in e.args] + [UNIFORM])
        raise self.err(e, f"cannot call `{ast.unparse(f)}` in a SIMT kernel",
                       help="use simt operations, math functions, min, max, abs, int, float and bool")

    def is_run_read(self, e) -> bool:
        """`x.run(i, k)` on a rank-1 simt.Ref: x[i], ..., x[i + k - 1], each read checked (one 128-bit
        load on the GPU when k elements are 16 bytes, aligned)."""
        if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "run"
                and isinstance(e.func.value, ast.Name) and e.func.value.id in self.params):
            return False
        p = self.params[e.func.value.id]
        if p.kind != REF or len(p.shape) != 1:
            raise self.err(e, f"`{e.func.value.id}.run(i, k)` reads a rank-1 simt.Ref",
                           help="read k consecutive elements of a rank-1 input")
        if len(e.args) != 2 or e.keywords:
            raise self.err(e, f"{e.func.value.id}.run(i, k) takes an index and a compile-time length")
        k = static_int(self, e.args[1], f"{e.func.value.id}.run's length")
        if isinstance(k, str):      # the unpacking fixes k: a Const would go unchecked until a launch
            raise self.err(e.args[1], f"{e.func.value.id}.run's length must be a literal or a module-level int, "
                                      f"not the simt.Const `{k}`", help="write the run's length as a number")
        if not 1 <= k <= 16:
            raise self.err(e.args[1], f"{e.func.value.id}.run's length is {k}; it must be 1 to 16")
        return True

    def device_call(self, e, op):
        if op in stubs.MAPPINGS:
            raise self.err(e, f"simt.{op}() is a permit mapping: use it as `for p in out.permits(simt.{op}(...))`")
        if op == "barrier":
            raise self.err(e, "simt.barrier() is a statement of its own")
        if op == "shared":
            raise self.err(e, "declare shared memory as `name = simt.shared(shape, dtype)` at the top level")
        if op not in stubs.DEVICE:
            raise self.err(e, f"simt has no device operation `{op}`")
        args = [self.expr(a) for a in e.args]
        if op in ("thread_id", "block_id", "block_dim", "grid_dim"):
            if len(e.args) > 1 or e.args and static_int(self, e.args[0], "an axis") not in (0, 1, 2):
                raise self.err(e, f"simt.{op}(axis) takes a constant axis 0, 1 or 2")
        if op in stubs.WARP_OPS:
            self.warp_op(e, op)
            return WARP if op in stubs.WARP_UNIFORM else VARYING
        if op in stubs.VARYING:
            return WARP if op == "warp_id" else VARYING
        return max(args + [UNIFORM])

    def warp_op(self, e, op):
        self.info.uses_warp_ops = True
        if self.contract.threads % 32:
            raise self.err(e, f"warp operation simt.{op}() needs a block size that is a multiple of 32; the "
                              f"contract's block has {self.contract.threads} threads",
                           help="use a block of 32, 64, ... threads: every warp must be whole")
        expected = {"shfl_down": 2, "shfl_xor": 2}.get(op, 1)
        if len(e.args) != expected or e.keywords:
            raise self.err(e, f"simt.{op}() takes {expected} argument(s)")
        node = self.diverging_node(WARP)
        if node is not None and self.final:
            raise self.err(e, f"warp operation simt.{op}() under thread-dependent control flow (line "
                              f"{self.src.loc(node).line}): every lane of the warp must reach it together",
                           help="compute the value under the branch, then call the warp operation outside it")

def shared_bytes(info: KernelInfo, consts: dict) -> int:
    """Bytes of static shared memory (`consts`: the Const values; at definition, {})."""
    return sum(static_elements(d, consts) * d.dtype.itemsize for d in info.shared.values() if not d.dynamic)


def static_elements(decl: SharedDecl, consts: dict) -> int:
    """A static shared array's element count (an unknown Const extent counts 0)."""
    n = 1
    for entry in decl.shape:
        n *= consts.get(entry, 0) if isinstance(entry, str) else entry
    return n


def dynamic_shared_bytes(info: KernelInfo, scalars: dict) -> int:
    """Bytes of dynamic shared memory a launch with these `int` scalars asks for (0: none)."""
    return sum(scalars[d.shape[0]] * d.dtype.itemsize for d in info.shared.values() if d.dynamic)


def dynamic_shared(info: KernelInfo):
    """The kernel's dynamic shared array's declaration, or None."""
    return next((d for d in info.shared.values() if d.dynamic), None)
