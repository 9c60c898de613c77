"""numba-cuda as a compiler, and a lean launch path of our own (pinned to numba-cuda 0.30).

numba's dispatcher costs 31-132 us of host time per call (it types and wraps every argument);
here a specialization is compiled once, its CUfunction kept, and each launch passes torch
tensors' pointers, shapes and strides straight to `cuda.core.launch` in numba's array ABI
(meminfo, parent, nitems, itemsize, data, shape..., strides in bytes...). This is the one
module that touches numba-cuda's internals.
"""
from __future__ import annotations

import ctypes
import math

_STREAMS: dict = {}


def numba_type(dtype):
    from numba.cuda import types as nt
    return getattr(nt, dtype.np.name)


def array_type(dtype, ndim: int, contiguous: bool):
    from numba.cuda import types as nt
    return nt.Array(numba_type(dtype), ndim, "C" if contiguous else "A")


def scalar_type(py_type):
    from numba.cuda import types as nt
    return {int: nt.int64, float: nt.float32, bool: nt.boolean}[py_type]


def compile_kernel(source: str, name: str, argtypes: tuple, device_index: int, tables: dict):
    """Compile the generated source for these argument types; returns the launchable kernel.
    `tables`: the constant tables' arrays, by the global names the source uses."""
    from numba import cuda
    from numba.cuda import types as nt
    namespace = {"cuda": cuda, "math": math, "__types": nt, "__f32": nt.float32, **tables}
    exec(compile(source, f"<simt kernel {name}>", "exec"), namespace)
    with cuda.gpus[device_index]:
        dispatcher = cuda.jit(argtypes)(namespace[name])    # compiles now, for these types only
        overload = dispatcher.compile(argtypes)            # the specialized kernel (numba's _Kernel)
        return overload._codelibrary.get_cufunc().kernel   # what numba's own launch passes to cuda.core


def _stream(handle: int):
    s = _STREAMS.get(handle)
    if s is None:
        from cuda.core import Stream
        s = _STREAMS[handle] = Stream.from_handle(handle)
    return s


def array_args(t, out: list) -> None:
    itemsize = t.element_size()
    out += (0, 0, t.numel(), itemsize, t.data_ptr(), *t.shape, *(s * itemsize for s in t.stride()))


def scalar_arg(value, py_type):
    if py_type is int:
        return ctypes.c_int64(value)
    if py_type is float:
        return ctypes.c_float(value)
    return bool(value)


def config(grid: tuple, block: tuple):
    from cuda.core import LaunchConfig
    return LaunchConfig(grid=grid, block=block)


def launch(kernel, launch_config, stream_handle: int, args: list) -> None:
    from cuda.core import launch as core_launch
    core_launch(_stream(stream_handle), launch_config, kernel, *args)
