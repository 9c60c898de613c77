"""The GPU back half: a SIMT kernel rewritten into a `numba.cuda.jit` kernel's source.

The rewrite keeps the user's code and replaces what tilesafe owns:
- an unsafe kernel's write at a computed index goes through `__stw`, checked like `__ld`, and
  sets the element's byte in the target's write mask (a parameter after the error flag);
- a permits walk becomes the index computation of its mapping plus the guard that drops the
  permits outside the target (the ragged last block holds none); `p[k]` becomes a coordinate;
- permit writes go through `__put` and `x[i]` reads proven in bounds (analysis.py) through
  `__at`: plain accesses without numba's negative-index wraparound (vector_access.py), as
  their indices are in bounds by construction; the other reads go through `__ld`, which
  on a failed check records the kernel line and reads element 0 instead, so the thread still
  reaches every barrier. The line goes into a per-thread register (`__bad`, the max of the
  failed lines) without a branch, so checked reads stay straight-line code whose loads are in
  flight together (a branch around an atomic per read made the compiler finish the previous
  read's arithmetic first); the thread's last statement adds it to the error flag (`__err`,
  read by the host at the next sync) with one atomic, only when a check failed. SIMT kernels
  do not return, so every thread reaches that statement;
- thread positions, barriers, warp operations and shared arrays become numba's `cuda.*`;
- constant tables become `cuda.const.array_like` arrays (constant memory);
- `simt.Const` parameters and captured module-level numbers become literals; float literals
  are f32 (`__f32(...)`), as Python scalars are in the tile language, not numba's f64.
The result is plain source text (`kernel.numba_source(...)` shows it), compiled by numba-cuda.
"""
from __future__ import annotations

import ast
import copy
import math

from . import mappings as M
from . import shared_shadow as shadow
from . import stubs, vector_access
from .kernel_info import node_key, resolve_op
from .params import CONST
from .static_bounds import Span, StaticBounds
from .static_values import static_value

_INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift,
            ast.RShift)

FULL_MASK = 0xFFFFFFFF
_AXES = ("x", "y", "z")

UNINITIALISED = 1 << 24    # added to the line in the error flag: a shared read of an element nobody wrote

PRELUDE = '''
@cuda.jit(device=True)
def __ld1(a, i, bad, line):
    ok = __inb(i, a.shape[0])
    bad[0] = max(bad[0], 0 if ok else line)
    return __at1(a, i if ok else 0)


@cuda.jit(device=True)
def __ld2(a, i, j, bad, line):
    ok = __inb(i, a.shape[0]) and __inb(j, a.shape[1])
    bad[0] = max(bad[0], 0 if ok else line)
    return __at2(a, i if ok else 0, j if ok else 0)


@cuda.jit(device=True)
def __ld3(a, i, j, k, bad, line):
    ok = __inb(i, a.shape[0]) and __inb(j, a.shape[1]) and __inb(k, a.shape[2])
    bad[0] = max(bad[0], 0 if ok else line)
    return __at3(a, i if ok else 0, j if ok else 0, k if ok else 0)


@cuda.jit(device=True)
def __stw1(a, w, i, v, err, line):
    if __inb(i, a.shape[0]):
        __put1(a, i, v)
        __put1(w, i, 1)
    else:
        cuda.atomic.max(err, 0, line)


@cuda.jit(device=True)
def __stw2(a, w, i, j, v, err, line):
    if __inb(i, a.shape[0]) and __inb(j, a.shape[1]):
        __put2(a, i, j, v)
        __put2(w, i, j, 1)
    else:
        cuda.atomic.max(err, 0, line)


@cuda.jit(device=True)
def __stw3(a, w, i, j, k, v, err, line):
    if __inb(i, a.shape[0]) and __inb(j, a.shape[1]) and __inb(k, a.shape[2]):
        __put3(a, i, j, k, v)
        __put3(w, i, j, k, 1)
    else:
        cuda.atomic.max(err, 0, line)


@cuda.jit(device=True)
def __get1(a, i, d):
    if __inb(i, a.shape[0]):
        return __at1(a, i)
    return d


@cuda.jit(device=True)
def __get2(a, i, j, d):
    if __inb(i, a.shape[0]) and __inb(j, a.shape[1]):
        return __at2(a, i, j)
    return d


@cuda.jit(device=True)
def __get3(a, i, j, k, d):
    if __inb(i, a.shape[0]) and __inb(j, a.shape[1]) and __inb(k, a.shape[2]):
        return __at3(a, i, j, k)
    return d


@cuda.jit(device=True)
def __atomic_add(h, i, v, err, line):
    if __inb(i, h.shape[0]):
        cuda.atomic.add(h, i, v)
    else:
        cuda.atomic.max(err, 0, line)


@cuda.jit(device=True)
def __atomic_max(h, i, v, err, line):
    if __inb(i, h.shape[0]):
        cuda.atomic.max(h, i, v)
    else:
        cuda.atomic.max(err, 0, line)


@cuda.jit(device=True)
def __atomic_min(h, i, v, err, line):
    if __inb(i, h.shape[0]):
        cuda.atomic.min(h, i, v)
    else:
        cuda.atomic.max(err, 0, line)


@cuda.jit(device=True)
def __lds1(a, w, i, err, line):
    ok = __inb(i, a.shape[0])
    if not ok:
        cuda.atomic.max(err, 0, line)
    elif __at1(w, i) == 0:
        cuda.atomic.max(err, 0, line + __UNINITIALISED)
    return __at1(a, i if ok else 0)


@cuda.jit(device=True)
def __lds2(a, w, i, j, err, line):
    ok = __inb(i, a.shape[0]) and __inb(j, a.shape[1])
    if not ok:
        cuda.atomic.max(err, 0, line)
    elif __at2(w, i, j) == 0:
        cuda.atomic.max(err, 0, line + __UNINITIALISED)
    return __at2(a, i if ok else 0, j if ok else 0)


@cuda.jit(device=True)
def __lds3(a, w, i, j, k, err, line):
    ok = __inb(i, a.shape[0]) and __inb(j, a.shape[1]) and __inb(k, a.shape[2])
    if not ok:
        cuda.atomic.max(err, 0, line)
    elif __at3(w, i, j, k) == 0:
        cuda.atomic.max(err, 0, line + __UNINITIALISED)
    return __at3(a, i if ok else 0, j if ok else 0, k if ok else 0)


@cuda.jit(device=True)
def __gets1(a, w, i, d, err, line):
    if __inb(i, a.shape[0]):
        if __at1(w, i) == 0:
            cuda.atomic.max(err, 0, line + __UNINITIALISED)
        return __at1(a, i)
    return d


@cuda.jit(device=True)
def __gets2(a, w, i, j, d, err, line):
    if __inb(i, a.shape[0]) and __inb(j, a.shape[1]):
        if __at2(w, i, j) == 0:
            cuda.atomic.max(err, 0, line + __UNINITIALISED)
        return __at2(a, i, j)
    return d


@cuda.jit(device=True)
def __gets3(a, w, i, j, k, d, err, line):
    if __inb(i, a.shape[0]) and __inb(j, a.shape[1]) and __inb(k, a.shape[2]):
        if __at3(w, i, j, k) == 0:
            cuda.atomic.max(err, 0, line + __UNINITIALISED)
        return __at3(a, i, j, k)
    return d


@cuda.jit(device=True)
def __warp_sum(v):
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 16)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 8)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 4)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 2)
    v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)
    return v


@cuda.jit(device=True)
def __warp_max(v):
    v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, 16))
    v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, 8))
    v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, 4))
    v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, 2))
    v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, 1))
    return v
'''.replace("__UNINITIALISED", str(UNINITIALISED))


def _run_reads() -> str:
    """`__ldrun{k}(a, i, bad, line)`: x.run(i, k). When k elements are 16 bytes (`a.itemsize * k == 16`
    folds at compile time), the array has unit stride, a 16-byte aligned start and at least k
    elements, and i is a multiple of k — conditions a loop's compiler hoists out of it when they do
    not change (numba-cuda/LLVM unswitch the loop; `i % k` is known where i steps by multiples of k)
    — the run is one 128-bit load, its check a select as `__ld1`'s (a run not wholly inside reads
    elements 0..k-1 instead and keeps the line): no branch between the loads, so unrolled runs stay
    in flight together. Otherwise k checked loads (`__ld1`)."""
    out = []
    for k in range(1, 17):
        scalar = ", ".join(f"__ld1(a, i + {j}, bad, line)" for j in range(k))
        vector = f"""    if a.itemsize * {k} == 16 and a.shape[0] >= {k} and i % {k} == 0 and __addr(a) % 16 == 0 \\
            and a.strides[0] == a.itemsize:
        ok = __inb(i, a.shape[0]) and __inb(i + {k - 1}, a.shape[0])
        bad[0] = max(bad[0], 0 if ok else line)
        return __vld{k}(a, i if ok else 0)
""" if k in (2, 4, 8, 16) else ""
        out.append(f"""
@cuda.jit(device=True)
def __ldrun{k}(a, i, bad, line):
{vector}    return ({scalar},)
""")
    return "\n".join(out)


RUN_READS = _run_reads()      # the same for every kernel: built once, not per compile


def kernel_source(src, info, params, scope, contract, consts: dict, name: str, sanitize: bool = False) -> str:
    """The numba-cuda source of one specialization (`consts`: the Const parameters' values).
    `sanitize`: shared arrays get shadow "written" bits, checked on every read (shared_shadow.py)."""
    lowered = lowered_kernel(src, info, params, scope, contract, consts, name, sanitize)
    return PRELUDE + RUN_READS + "\n\n" + ast.unparse(lowered) + "\n"


def lowered_kernel(src, info, params, scope, contract, consts: dict, name: str, sanitize: bool = False):
    """`kernel_source`'s kernel function as a tree whose nodes keep the user's line numbers
    (numba_errors.py maps a compile error's line back to the user's statement with it)."""
    tree = copy.deepcopy(src.tree)
    tree.decorator_list = []
    lowered = _Lower(src, info, {p.name: p for p in params}, scope, contract, consts, sanitize).visit(tree)
    lowered.name = name
    lowered.decorator_list = []
    lowered.returns = None
    kept = [a for a in lowered.args.args if a.arg in {p.name for p in params if p.kind != CONST}]
    for a in kept:
        a.annotation = None
    lowered.args.args = kept + [ast.arg("__err")] + [ast.arg(written_name(t)) for t in written_targets(info)]
    lowered.args.kwonlyargs, lowered.args.kw_defaults, lowered.args.defaults = [], [], []
    tables = [ast.parse(f"{n} = cuda.const.array_like({table_global(n)})").body[0] for n in info.tables]
    if _uses_bad(lowered):     # checked reads: the failed line in a register, flushed once at the end
        doc = int(bool(lowered.body) and isinstance(lowered.body[0], ast.Expr)
                  and isinstance(lowered.body[0].value, ast.Constant))
        lowered.body[doc:doc] = ast.parse(f"{BAD} = cuda.local.array(1, __types.int32)\n{BAD}[0] = 0").body
        lowered.body += ast.parse(f"if {BAD}[0] != 0:\n    cuda.atomic.max(__err, 0, {BAD}[0])").body
    lowered.body[:0] = tables      # constant memory, filled from the module-level arrays at compile time
    ast.fix_missing_locations(lowered)
    return lowered


BAD = "__bad"     # the thread's failed-read line (0: none), a one-element local array numba keeps in a register


def _uses_bad(tree) -> bool:
    return any(isinstance(n, ast.Name) and n.id == BAD for n in ast.walk(tree))


def written_targets(info) -> list:
    """The outputs an unsafe kernel writes at computed indices, in the order their write masks
    follow the error flag among the kernel's parameters."""
    return sorted(info.raw_store_targets)


def written_name(target: str) -> str:
    """The parameter of `target`'s write mask: a byte per element, set by each unsafe write that
    lands (so the host can count those elements as written, S14, when the launch is synced)."""
    return f"{target}__wrote"


def table_global(name: str) -> str:
    """The name under which a constant table's array is given to the compiled module."""
    return f"__table_{name}"


def _attr(*names):
    node = ast.Name(names[0], ast.Load())
    for n in names[1:]:
        node = ast.Attribute(node, n, ast.Load())
    return node


def _call(func, *args):
    return ast.Call(func=func, args=list(args), keywords=[])


def _int(v):
    return ast.Constant(int(v))


def _bin(a, op, b):
    return ast.BinOp(a, op, b)


def _name(n, ctx=None):
    return ast.Name(n, ctx or ast.Load())


_AXIS_OPS = ("thread_id", "block_id", "block_dim", "grid_dim")     # their argument: an axis
_INT_CALLS = _AXIS_OPS + ("global_id", "lane", "warp_id")          # the thread positions: ints


class _Lower(ast.NodeTransformer):
    def __init__(self, src, info, params, scope, contract, consts, sanitize=False):
        self.src, self.info, self.params, self.scope = src, info, params, scope
        self.contract, self.consts, self.sanitize = contract, consts, sanitize
        self.block = tuple(contract.block) + (1,) * (3 - len(contract.block))
        self.threads = contract.threads
        self.walks = {node_key(w.node): w for w in info.walks}
        self.coords: dict = {}        # live permit name -> its coordinate names
        self.counter = 0
        self.vector_reads: dict = {}   # input -> (its run's tuple, element), inside a vectorised run
        self.locals = {n.id for n in ast.walk(src.tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.sources = StaticBounds(src.tree, contract, lambda f: resolve_op(f, scope), scope).sources
        self.own = self.locals | set(params)     # the kernel's own names (static_values.py)

    # -- pieces -----------------------------------------------------------------------------------
    def value(self, v):
        return self.consts[v] if isinstance(v, str) else v

    def static(self, node) -> int:
        """A compile-time int the analysis accepted (a literal, a module-level int, a Const)."""
        return self.value(static_value(self, node))

    def fresh(self, stem):
        self.counter += 1
        return f"__{stem}{self.counter}"

    def flat_thread(self):
        e = _attr("cuda", "threadIdx", "x")
        if self.block[1] > 1 or self.block[2] > 1:
            e = _bin(e, ast.Add(), _bin(_int(self.block[0]), ast.Mult(),
                                        _bin(_attr("cuda", "threadIdx", "y"), ast.Add(),
                                             _bin(_int(self.block[1]), ast.Mult(), _attr("cuda", "threadIdx", "z")))))
        return e

    def global_thread(self):
        return _bin(_bin(_attr("cuda", "blockIdx", "x"), ast.Mult(), _int(self.threads)), ast.Add(),
                    self.flat_thread())

    def line(self, node):
        return _int(self.src.loc(node).line)

    # -- integer arithmetic -----------------------------------------------------------------------
    def visit_BinOp(self, node):
        """`a % c` and `a // c` of an integer `a` by a power-of-two compile-time c: `a & (c - 1)` and
        `a >> log2(c)`, which are Python's floor % and // exactly, for negative `a` too (two's
        complement). numba computes `%` and `//` on signed ints with fix-ups for negative operands:
        five 64-bit instructions each, which tile indices (`p[0] % 64 // 2`) pay per element."""
        if isinstance(node.op, (ast.Mod, ast.FloorDiv)):
            c = self.static(node.right)
            # c <= 2**63: a shift by 64 or more is undefined, and a wider mask is no int64
            if type(c) is int and 0 < c <= 1 << 63 and c & (c - 1) == 0 and self.integer(node.left):
                left = self.visit(node.left)
                if isinstance(node.op, ast.Mod):
                    return ast.copy_location(_bin(left, ast.BitAnd(), _int(c - 1)), node)
                return ast.copy_location(_bin(left, ast.RShift(), _int(c.bit_length() - 1)), node)
        return self.generic_visit(node)

    def integer(self, e, depth=0) -> bool:
        """Is `e` an int by its form (a float would make `&` a type error): int literals, permit
        coordinates, thread positions, int parameters and module-level ints, names bound once to
        an int expression or by a range loop, and + - * // % & | ^ << >> of ints."""
        if depth > 20:
            return False
        if isinstance(e, ast.Constant):
            return type(e.value) is int
        if isinstance(e, ast.Subscript):
            return isinstance(e.value, ast.Name) and e.value.id in self.coords
        if isinstance(e, ast.Call):
            return resolve_op(e.func, self.scope) in _INT_CALLS
        if isinstance(e, ast.BinOp):
            return isinstance(e.op, _INT_OPS) and self.integer(e.left, depth + 1) and self.integer(e.right, depth + 1)
        if isinstance(e, ast.Name):
            p = self.params.get(e.id)
            if p is not None:
                return not p.is_tensor and p.dtype is int
            source = self.sources.get(e.id)
            if source is not None:
                return self.integer(source.start, depth + 1) and self.integer(source.stop, depth + 1) \
                    if isinstance(source, Span) else self.integer(source, depth + 1)
            return e.id not in self.locals and type(self.scope.get(e.id)) is int
        return False

    # -- names and constants ----------------------------------------------------------------------
    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            p = self.params.get(node.id)
            if p is not None and p.kind == CONST:
                return self.visit_Constant(ast.copy_location(ast.Constant(self.consts[node.id]), node))
            if p is None and node.id not in self.locals and node.id not in self.coords:
                v = self.scope.get(node.id)
                if isinstance(v, (bool, int, float)):
                    return self.visit_Constant(ast.copy_location(ast.Constant(v), node))
        return node

    def visit_Constant(self, node):
        if type(node.value) is float:      # a Python float takes f32, as in the tile language (not numba's f64)
            return ast.copy_location(_call(_name("__f32"), node), node)
        return node

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == "math" and isinstance(getattr(math, node.attr, None),
                                                                                        float):
            return ast.copy_location(_call(_name("__f32"), node), node)
        return self.generic_visit(node)

    # -- statements -------------------------------------------------------------------------------
    def visit_Expr(self, node):
        v = node.value
        if isinstance(v, ast.Call):
            op = resolve_op(v.func, self.scope)
            if op == "barrier":
                return ast.copy_location(ast.Expr(_call(_attr("cuda", "syncthreads"))), node)
            f = v.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr in ("add", "max", "min") \
                    and (f.value.id in self.params or f.value.id in self.info.shared):
                args = [self.visit(a) for a in v.args]
                call = ast.Expr(_call(_name(f"__atomic_{f.attr}"), f.value, *args, _name("__err"), self.line(v)))
                if self.sanitize and f.value.id in self.info.shared:     # the element must have been written
                    check = _call(_name("__lds1"), f.value, _name(shadow.name_of(f.value.id)), copy.deepcopy(args[0]),
                                  _name("__err"), self.line(v))
                    return [ast.copy_location(ast.Expr(check), node), ast.copy_location(call, node)]
                return ast.copy_location(call, node)
        return self.generic_visit(node)

    def visit_Assign(self, node):
        target = node.targets[0]
        value = node.value
        if isinstance(value, ast.Call) and resolve_op(value.func, self.scope) == "shared":
            decl = self.info.shared[target.id]
            if decl.dynamic:     # the launch's dynamic shared memory, cut to the array's length
                node.value = ast.Subscript(_call(_attr("cuda", "shared", "array"), _int(0),
                                                 _attr("__types", decl.dtype.np.name)),
                                           ast.Slice(None, _name(decl.shape[0]), None), ast.Load())
                shape = [_name(decl.shape[0])]
            else:
                shape = [_int(self.value(e)) for e in decl.shape]
                node.value = _call(_attr("cuda", "shared", "array"), ast.Tuple(shape, ast.Load()),
                                   _attr("__types", decl.dtype.np.name))
            if self.sanitize:
                return [node] + shadow.declare(decl, shape, self.flat_thread(), self.threads)
            return node
        if isinstance(target, ast.Subscript) and node_key(target) in self.info.raw_stores:   # unsafe: checked
            index = self.visit(target.slice)
            items = index.elts if isinstance(index, ast.Tuple) else [index]
            call = _call(_name(f"__stw{len(items)}"), target.value, _name(written_name(target.value.id)), *items,
                         self.visit(value), _name("__err"), self.line(target))
            return ast.copy_location(ast.Expr(call), node)
        if isinstance(target, ast.Subscript):      # a permit's element: in bounds, written without wraparound
            target.slice = self.index(target.slice)
            items = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
            put = ast.copy_location(ast.Expr(_call(_name(f"__put{len(items)}"), target.value, *items,
                                                   self.visit(value))), node)
            if self.sanitize and isinstance(target.value, ast.Name) and target.value.id in self.info.shared:
                return [put, shadow.mark(target)]       # the element is written: its shadow bit says so
            return put
        return self.generic_visit(node)

    def visit_For(self, node):
        walk = self.walks.get(node_key(node))
        if walk is None:
            return self.generic_visit(node)
        rank = walk.rank
        names = [f"{walk.permit}__{k}" for k in range(rank)]
        original = copy.deepcopy(node.body)      # lowering rewrites the body in place
        self.coords[walk.permit] = names
        try:
            body = []
            for s in node.body:
                lowered = self.visit(s)
                body += lowered if isinstance(lowered, list) else [lowered]
        finally:
            del self.coords[walk.permit]
        lowered = self.lower_walk(walk, names, body)
        fast = self.hoisted(walk, original, lowered)
        return fast if fast is not None else lowered

    def hoisted(self, walk, body, lowered):
        """A run(k)/chunk(k) walk whose body is one write `t[p] = expr`: when the thread's whole run
        is inside `t`, evaluate the k values first and store them after, so the k reads of each
        input are in flight together (the loads of one element cannot pass the store of the one
        before otherwise: the compiler cannot know an output never aliases an input, which S7
        checks at launch, and an output is never read in a kernel; nor that a shared array's store
        does not alias a global read). The ragged last run keeps the guarded loop. Returns None
        where the shape does not fit."""
        m = M.Mapping(walk.kind, self.value(walk.size), self.value(walk.offset))
        if m.kind not in (M.RUN, M.CHUNK) or not 2 <= m.size <= 16 or len(body) != 1 \
                or walk.shared and self.sanitize:      # a sanitized shared write also marks its shadow bit
            return None
        stmt = body[0]
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript)
                and isinstance(stmt.targets[0].slice, ast.Name) and stmt.targets[0].slice.id == walk.permit
                and node_key(stmt.targets[0]) not in self.info.raw_stores):
            return None
        g = self.flat_thread() if walk.shared else self.global_thread()
        bid = (lambda axis: _int(0)) if walk.shared else (lambda axis: _attr("cuda", "blockIdx", axis))
        head, elems = [], []
        if walk.rank == 2:       # chunk: column tx, rows ty + j * by of the block's tile
            by = self.block[1]
            col = self.fresh(f"{walk.permit}__c")
            head.append(ast.Assign([_name(col, ast.Store())],
                                   _bin(_bin(bid("x"), ast.Mult(), _int(self.block[0])), ast.Add(),
                                        _attr("cuda", "threadIdx", "x"))))
            row0 = _bin(_bin(bid("y"), ast.Mult(), _int(by * m.size)), ast.Add(), _attr("cuda", "threadIdx", "y"))
            firsts = [_bin(copy.deepcopy(row0), ast.Add(), _int(j * by)) for j in range(m.size)]
        elif m.kind == M.RUN:
            firsts = [_bin(_bin(copy.deepcopy(g), ast.Mult(), _int(m.size)), ast.Add(), _int(j))
                      for j in range(m.size)]
        else:
            base = _bin(bid("x"), ast.Mult(), _int(self.threads * m.size))
            firsts = [_bin(_bin(copy.deepcopy(base), ast.Add(), _int(j * self.threads)), ast.Add(),
                           self.flat_thread()) for j in range(m.size)]
        coords = [self.fresh(f"{walk.permit}__h") for _ in range(m.size)]
        head += [ast.Assign([_name(c, ast.Store())], e) for c, e in zip(coords, firsts)]
        elems = [[c, col] if walk.rank == 2 else [c] for c in coords]
        values = [self.fresh("v") for _ in range(m.size)]
        out = self.run_values(walk, stmt, elems, values, {})
        out += [ast.Expr(_call(_name(f"__put{len(e)}"), _name(walk.target), *[_name(n) for n in e], _name(v)))
                for e, v in zip(elems, values)]
        vector = None if walk.shared else self.vectorised(walk, m, stmt, coords, values)
        if vector is not None:
            out = [ast.If(vector[0], vector[1], out)]
        inside = ast.Compare(_name(coords[-1]), [ast.Lt()], [self.extent(walk, 0)])
        if walk.rank == 2:
            inside = ast.BoolOp(ast.And(), [inside, ast.Compare(_name(col), [ast.Lt()], [self.extent(walk, 1)])])
        return head + [ast.If(inside, out, lowered)]

    def run_values(self, walk, stmt, coords, values, vector_reads) -> list:
        """`v_j = expr` for each element j of the run, the permit standing for coordinate j."""
        out = []
        for j, (c, v) in enumerate(zip(coords, values)):
            self.coords[walk.permit] = c if isinstance(c, list) else [c]
            self.vector_reads = {name: (t, j) for name, t in vector_reads.items()}
            try:
                out.append(ast.Assign([_name(v, ast.Store())], self.visit(copy.deepcopy(stmt.value))))
            finally:
                del self.coords[walk.permit]
                self.vector_reads = {}
        return out

    def vectorised(self, walk, m, stmt, coords, values):
        """A run(k) of 16 bytes: (the in-kernel test that the tensors are 16-byte aligned with unit
        stride, the statements reading each input's run with one 128-bit load and storing the
        output's with one 128-bit store), or None. Only reads proven in bounds at the permit are
        vectorised: they lie inside the run, which lies inside the output (vector_access.py)."""
        out_dtype = self.params[walk.target].dtype
        if m.kind != M.RUN or vector_access.WIDTHS.get(out_dtype.itemsize) != m.size:
            return None
        reads = []
        for n in ast.walk(stmt.value):
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in self.params \
                    and isinstance(n.slice, ast.Name) and n.slice.id == walk.permit \
                    and node_key(n) in self.info.proven and self.params[n.value.id].dtype.itemsize == \
                    out_dtype.itemsize and n.value.id not in reads:
                reads.append(n.value.id)
        tests = []
        for name in [walk.target] + reads:
            size = self.params[name].dtype.itemsize
            tests += [ast.Compare(_bin(_call(_name("__addr"), _name(name)), ast.Mod(), _int(16)), [ast.Eq()],
                                  [_int(0)]),
                      ast.Compare(ast.Subscript(_attr(name, "strides"), _int(0), ast.Load()), [ast.Eq()],
                                  [_int(size)])]
        loads = {name: self.fresh(f"{name}_run") for name in reads}
        body = [ast.Assign([_name(t, ast.Store())], _call(_name(f"__vld{m.size}"), _name(name), _name(coords[0])))
                for name, t in loads.items()]
        body += self.run_values(walk, stmt, coords, values, loads)
        body.append(ast.Expr(_call(_name(f"__vst{m.size}"), _name(walk.target), _name(coords[0]),
                                   ast.Tuple([_name(v) for v in values], ast.Load()))))
        return ast.BoolOp(ast.And(), tests), body

    def extent(self, walk, axis):
        if walk.shared:
            decl = self.info.shared[walk.target]
            return _name(decl.shape[0]) if decl.dynamic else _int(self.value(decl.shape[axis]))
        return ast.Subscript(_attr(walk.target, "shape"), _int(axis), ast.Load())

    def lower_walk(self, walk, names, body):
        m = M.Mapping(walk.kind, self.value(walk.size), self.value(walk.offset))
        g = self.flat_thread() if walk.shared else self.global_thread()
        bid = _int(0) if walk.shared else _attr("cuda", "blockIdx", "x")
        store = [_name(n, ast.Store()) for n in names]
        n0 = self.extent(walk, 0)

        def assign(i, e):
            return ast.Assign([store[i]], e)

        def guard(conds, stmts):
            test = conds[0] if len(conds) == 1 else ast.BoolOp(ast.And(), conds)
            return ast.If(test, stmts, [])

        def lt(i):
            return ast.Compare(_name(names[i]), [ast.Lt()], [self.extent(walk, i)])

        if m.kind == M.THREAD:
            out = []
            for k in range(walk.rank):
                axis = _AXES[walk.rank - 1 - k]
                e = _attr("cuda", "threadIdx", axis)
                if not walk.shared:
                    e = _bin(_bin(_attr("cuda", "blockIdx", axis), ast.Mult(), _int(self.block["xyz".index(axis)])),
                             ast.Add(), e)
                out.append(assign(k, e))
            return out + [guard([lt(k) for k in range(walk.rank)], body)]
        if m.kind == M.RUN:
            j = self.fresh("j")
            first = _bin(_bin(g, ast.Mult(), _int(m.size)), ast.Add(), _name(j))
            return [ast.For(_name(j, ast.Store()), _call(_name("range"), _int(m.size)),
                            [assign(0, first), guard([lt(0)], body)], [])]
        if m.kind == M.CHUNK and walk.rank == 2:    # column tx, rows ty + j * by of the block's tile
            j = self.fresh("j")
            by = self.block[1]
            rbid = _int(0) if walk.shared else _attr("cuda", "blockIdx", "y")
            cbid = _int(0) if walk.shared else _attr("cuda", "blockIdx", "x")
            row = _bin(_bin(_bin(rbid, ast.Mult(), _int(by * m.size)), ast.Add(),
                            _bin(_name(j), ast.Mult(), _int(by))), ast.Add(), _attr("cuda", "threadIdx", "y"))
            col = _bin(_bin(cbid, ast.Mult(), _int(self.block[0])), ast.Add(), _attr("cuda", "threadIdx", "x"))
            return [ast.For(_name(j, ast.Store()), _call(_name("range"), _int(m.size)),
                            [assign(0, row), assign(1, col), guard([lt(0), lt(1)], body)], [])]
        if m.kind == M.CHUNK:
            j = self.fresh("j")
            base = _bin(bid, ast.Mult(), _int(self.threads * m.size))
            e = _bin(_bin(base, ast.Add(), _bin(_name(j), ast.Mult(), _int(self.threads))), ast.Add(),
                     self.flat_thread())
            return [ast.For(_name(j, ast.Store()), _call(_name("range"), _int(m.size)),
                            [assign(0, e), guard([lt(0)], body)], [])]
        if m.kind == M.GRID_STRIDE:
            step = _bin(_attr("cuda", "gridDim", "x"), ast.Mult(), _int(self.threads))
            return [ast.For(store[0], _call(_name("range"), g, n0, step), body, [])]
        if m.kind == M.AT:
            e = _bin(_bin(g, ast.Mult(), _int(m.size)), ast.Add(), _int(m.offset))
            return [assign(0, e), guard([lt(0)], body)]
        lane = _bin(self.flat_thread(), ast.BitAnd(), _int(31))      # % 32 and // 32 of a non-negative int
        if m.kind == M.WARP:
            unit, stride = _bin(g, ast.RShift(), _int(5)), 32
            first = lane
        else:    # BLOCK
            unit, stride = bid, self.threads
            first = self.flat_thread()
        if m.size == 0:     # a row of a rank-2 target
            return [assign(0, unit), guard([lt(0)], [ast.For(store[1], _call(_name("range"), first,
                                                                               self.extent(walk, 1), _int(stride)),
                                                             body, [])])]
        start = _bin(_bin(unit, ast.Mult(), _int(m.size)), ast.Add(), first)
        stop = _call(_name("min"), _bin(_bin(unit, ast.Mult(), _int(m.size)), ast.Add(), _int(m.size)), n0)
        return [ast.For(store[0], _call(_name("range"), start, stop, _int(stride)), body, [])]

    # -- expressions ------------------------------------------------------------------------------
    def index(self, index):
        if isinstance(index, ast.Name) and index.id in self.coords:
            names = self.coords[index.id]
            return _name(names[0]) if len(names) == 1 else ast.Tuple([_name(n) for n in names], ast.Load())
        return self.visit(index)

    def visit_Subscript(self, node):
        base = node.value
        if isinstance(base, ast.Name) and base.id in self.vector_reads and isinstance(node.slice, ast.Name) \
                and node.slice.id in self.coords and node_key(node) in self.info.proven:
            t, j = self.vector_reads[base.id]         # element j of the input's 128-bit run
            return ast.copy_location(ast.Subscript(_name(t), _int(j), ast.Load()), node)
        if isinstance(base, ast.Name) and base.id in self.coords:
            return ast.copy_location(_name(self.coords[base.id][self.static(node.slice)]), node)
        if isinstance(base, ast.Name) and isinstance(node.ctx, ast.Load) and \
                (base.id in self.params and self.params[base.id].is_tensor or base.id in self.info.shared
                 or base.id in self.info.tables):
            index = self.index(node.slice)
            items = index.elts if isinstance(index, ast.Tuple) else [index]
            if self.sanitize and base.id in self.info.shared:     # in bounds and written, or flagged
                return ast.copy_location(_call(_name(f"__lds{len(items)}"), base, _name(shadow.name_of(base.id)),
                                               *items, _name("__err"), self.line(node)), node)
            if node_key(node) in self.info.proven:     # in bounds: no check, and no wraparound either
                return ast.copy_location(_call(_name(f"__at{len(items)}"), base, *items), node)
            return ast.copy_location(_call(_name(f"__ld{len(items)}"), base, *items, _name(BAD),
                                           self.line(node)), node)
        return self.generic_visit(node)

    def visit_Call(self, node):
        f = node.func
        op = resolve_op(f, self.scope)
        args = [self.visit(a) for a in node.args]
        if op is not None:
            return ast.copy_location(self.device(op, args, node), node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr == "run" \
                and f.value.id in self.params:
            return ast.copy_location(_call(_name(f"__ldrun{self.static(node.args[1])}"), f.value, args[0], _name(BAD),
                                           self.line(node)), node)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr == "get":
            index = self.index(node.args[0])
            items = index.elts if isinstance(index, ast.Tuple) else [index]
            if self.sanitize and f.value.id in self.info.shared:
                return ast.copy_location(_call(_name(f"__gets{len(items)}"), f.value,
                                               _name(shadow.name_of(f.value.id)), *items, args[1], _name("__err"),
                                               self.line(node)), node)
            return ast.copy_location(_call(_name(f"__get{len(items)}"), f.value, *items, args[1]), node)
        node.args = args
        return node

    def device(self, op, args, node):
        axis = _AXES[self.static(node.args[0])] if node.args and op in _AXIS_OPS else "x"
        if op == "thread_id":
            return _attr("cuda", "threadIdx", axis)
        if op == "block_id":
            return _attr("cuda", "blockIdx", axis)
        if op == "block_dim":
            return _int(self.block["xyz".index(axis)])
        if op == "grid_dim":
            return _attr("cuda", "gridDim", axis)
        if op == "global_id":
            return self.global_thread()
        if op == "lane":
            return _bin(self.flat_thread(), ast.BitAnd(), _int(31))
        if op == "warp_id":
            return _bin(self.flat_thread(), ast.RShift(), _int(5))
        if op in ("shfl_down", "shfl_xor"):
            return _call(_attr("cuda", f"{op}_sync"), _int(FULL_MASK), *args)
        if op == "ballot":     # numba-cuda types the vote as i32; CUDA's __ballot_sync is unsigned (u32)
            return _call(_attr("__types", "uint32"), _call(_attr("cuda", "ballot_sync"), _int(FULL_MASK), *args))
        if op in ("warp_sum", "warp_max"):
            return _call(_name(f"__{op}"), *args)
        raise AssertionError(op if op in stubs.DEVICE else f"unexpected {op}")
