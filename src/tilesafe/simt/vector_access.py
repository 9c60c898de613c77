"""128-bit loads and stores, and element accesses without index wraparound, for the GPU lowering:
numba-cuda intrinsics, compiled into SIMT kernels.

`__at{n}(a, i, ...)` reads and `__put{n}(a, i, ..., v)` writes one element of a rank-n array
without numba's negative-index wraparound (a compare and a select per signed index, and the
64-bit arithmetic around them): the lowering uses them only where the indices are known to be
in bounds — permits, reads proven in bounds, and the `__ld`/`__get` helpers after their check.
On a 2-D transpose that is 152 SASS instructions against 272.

A `simt.run(k)` walk hands each thread k consecutive elements. When k elements are 16 bytes
(4 x f32/i32, 2 x f64/i64, 8 x f16/i16) and the tensors are 16-byte aligned with unit stride,
the lowering (lower_numba.py) reads each input's run with one `__vld{k}` — an LLVM `<k x T>` load
with align 16, which the NVPTX backend emits as one `ld.global.v4`-class instruction — and
stores the output's run with one `__vst{k}`. Whether a launch may take that path is decided in
the kernel itself, uniformly (`__addr(t) % 16 == 0`, a unit stride); otherwise the scalar path
runs. Only the GPU compile imports numba; the CPU executor never sees these.
"""
from __future__ import annotations

import functools

WIDTHS = {1: 16, 2: 8, 4: 4, 8: 2}      # itemsize -> elements in 16 bytes


@functools.cache
def intrinsics() -> dict:
    """name -> intrinsic, for the namespace the generated source is compiled in."""
    out = {"__addr": _address(), "__inb": _in_bounds()}
    for rank in (1, 2, 3):
        out[f"__at{rank}"], out[f"__put{rank}"] = _element_load(rank), _element_store(rank)
    for width in sorted(set(WIDTHS.values())):
        out[f"__vld{width}"] = _load(width)
        out[f"__vst{width}"] = _store(width)
    return out


def _pointer(context, builder, array_type, array, indices, index_types):
    """The address of an element, without wraparound (its indices are in bounds by the caller's check)."""
    from numba.cuda import cgutils
    from numba.cuda import types
    ary = context.make_array(array_type)(context, builder, value=array)
    inds = [context.cast(builder, i, t, types.intp) for i, t in zip(indices, index_types)]
    return cgutils.get_item_pointer(context, builder, array_type, ary, inds, wraparound=False)


def _element_load(rank: int):
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx, array, *indices):
        if not isinstance(array, types.Array) or array.ndim != rank or len(indices) != rank \
                or not all(isinstance(i, (types.Integer, types.Boolean)) for i in indices):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_pointer(context, builder, sig.args[0], args[0], args[1:], sig.args[1:]))
        return array.dtype(array, *indices), codegen
    return intrinsic(_fixed_arity(typer, rank + 1))


def _element_store(rank: int):
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def typer(typingctx, array, *rest):
        indices, value = rest[:-1], rest[-1]
        if not isinstance(array, types.Array) or array.ndim != rank or len(indices) != rank \
                or not all(isinstance(i, (types.Integer, types.Boolean)) for i in indices) \
                or not isinstance(value, (types.Number, types.Boolean)):
            return None

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[-1], sig.args[-1], sig.args[0].dtype)
            builder.store(v, _pointer(context, builder, sig.args[0], args[0], args[1:-1], sig.args[1:-1]))
            return context.get_dummy_value()
        return types.void(array, *rest), codegen
    return intrinsic(_fixed_arity(typer, rank + 2))


def _fixed_arity(typer, n: int):
    """numba's @intrinsic reads the typer's signature: give it n named arguments after typingctx."""
    names = [f"a{k}" for k in range(n)]
    ns = {"typer": typer}
    exec(f"def fixed(typingctx, {', '.join(names)}):\n    return typer(typingctx, {', '.join(names)})", ns)
    return ns["fixed"]


def _load(width: int):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def vload(typingctx, array, index):
        if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(index, types.Integer):
            return None
        sig = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            array_type, index_type = sig.args
            ptr = _pointer(context, builder, array_type, args[0], [args[1]], [index_type])
            vector = ir.VectorType(context.get_value_type(array_type.dtype), width)
            loaded = builder.load(builder.bitcast(ptr, vector.as_pointer()), align=16)
            items = [builder.extract_element(loaded, ir.Constant(ir.IntType(32), k)) for k in range(width)]
            return context.make_tuple(builder, sig.return_type, items)
        return sig, codegen
    return vload


def _store(width: int):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def vstore(typingctx, array, index, values):
        if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(values, types.BaseTuple) \
                or len(values) != width:
            return None
        sig = types.void(array, index, values)

        def codegen(context, builder, sig, args):
            array_type, index_type, values_type = sig.args
            ptr = _pointer(context, builder, array_type, args[0], [args[1]], [index_type])
            element = context.get_value_type(array_type.dtype)
            vector = ir.Constant(ir.VectorType(element, width), ir.Undefined)
            for k in range(width):
                v = context.cast(builder, builder.extract_value(args[2], k), values_type[k], array_type.dtype)
                vector = builder.insert_element(vector, v, ir.Constant(ir.IntType(32), k))
            builder.store(vector, builder.bitcast(ptr, vector.type.as_pointer()), align=16)
            return context.get_dummy_value()
        return sig, codegen
    return vstore


def _in_bounds():
    """`__inb(i, n)`: 0 <= i < n as one unsigned compare (an extent is never negative, so a negative i
    is a huge unsigned one); numba's `i >= 0 and i < n` is two signed compares and an `and`, per read."""
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def in_bounds(typingctx, i, n):
        if not isinstance(i, (types.Integer, types.Boolean)) or not isinstance(n, types.Integer):
            return None          # a bool index is 0 or 1, as Python's and numba's own compares take it

        def codegen(context, builder, sig, args):
            a = context.cast(builder, args[0], sig.args[0], types.int64)
            b = context.cast(builder, args[1], sig.args[1], types.int64)
            return builder.icmp_unsigned("<", a, b)
        return types.boolean(i, n), codegen
    return in_bounds


def _address():
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def address(typingctx, array):
        if not isinstance(array, types.Array):
            return None
        sig = types.int64(array)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            return builder.ptrtoint(ary.data, ir.IntType(64))
        return sig, codegen
    return address


def simulated() -> dict:
    """Python stand-ins for numba's CUDA simulator (tests/simt/simulate_lowering.py)."""
    import numpy as np

    def vld(width):
        return lambda a, i: tuple(a[i + k] for k in range(width))

    def vst(width):
        def store(a, i, values):
            for k in range(width):
                a[i + k] = values[k]
        return store

    def inside(a, i):
        """The GPU's __at/__put have no wraparound and no check: an index the lowering took for in
        bounds that is not (negative too, which NumPy would wrap) fails the simulated run here."""
        if len(i) != len(a.shape) or not all(0 <= k < n for k, n in zip(i, a.shape)):
            raise IndexError(f"__at/__put at {tuple(i)} outside shape {tuple(a.shape)}: the lowering's "
                             "in-bounds claim is wrong")
        return i

    def at(a, *i):
        return a[inside(a, i)]

    def put(a, *rest):
        a[inside(a, rest[:-1])] = rest[-1]
    out = {"__addr": lambda a: np.asarray(a).ctypes.data, "__inb": lambda i, n: 0 <= i < n}
    for rank in (1, 2, 3):
        out[f"__at{rank}"], out[f"__put{rank}"] = at, put
    for width in sorted(set(WIDTHS.values())):
        out[f"__vld{width}"], out[f"__vst{width}"] = vld(width), vst(width)
    return out
