"""128-bit loads and stores for the GPU lowering: numba-cuda intrinsics, compiled into SIMT kernels.

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
    out = {"__addr": _address()}
    for width in sorted(set(WIDTHS.values())):
        out[f"__vld{width}"] = _load(width)
        out[f"__vst{width}"] = _store(width)
    return out


def _element_pointer(context, builder, array_type, array, index, index_type):
    from numba.cuda import cgutils
    from numba.cuda import types
    ary = context.make_array(array_type)(context, builder, value=array)
    i = context.cast(builder, index, index_type, types.intp)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [i], wraparound=False)


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
            ptr = _element_pointer(context, builder, array_type, args[0], args[1], index_type)
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
            ptr = _element_pointer(context, builder, array_type, args[0], args[1], index_type)
            element = context.get_value_type(array_type.dtype)
            vector = ir.Constant(ir.VectorType(element, width), ir.Undefined)
            for k in range(width):
                v = context.cast(builder, builder.extract_value(args[2], k), values_type[k], array_type.dtype)
                vector = builder.insert_element(vector, v, ir.Constant(ir.IntType(32), k))
            builder.store(vector, builder.bitcast(ptr, vector.type.as_pointer()), align=16)
            return context.get_dummy_value()
        return sig, codegen
    return vstore


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
    out = {"__addr": lambda a: np.asarray(a).ctypes.data}
    for width in sorted(set(WIDTHS.values())):
        out[f"__vld{width}"], out[f"__vst{width}"] = vld(width), vst(width)
    return out
