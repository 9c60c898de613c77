"""numba-cuda as a compiler, and a lean launch path of our own (pinned to numba-cuda 0.30).

numba's dispatcher costs 31-132 us of host time per call (it types and wraps every argument);
here a specialization is compiled once, its CUkernel kept, and a layout's torch tensors'
pointers, shapes and strides are marshalled once, in numba's array ABI (meminfo, parent, nitems,
itemsize, data, shape..., strides in bytes...), into a C parameter array (`Params`); each launch
is then one `cuLaunchKernel` call with that array's address (cuda.core's `launch` converted every
argument on every call). The data pointers are the one part of the array a launch plan rewrites
per launch.
This is the one module that touches numba-cuda's internals.
"""
from __future__ import annotations

import ctypes
import math

import torch

_STREAMS: dict = {}
_DRIVER = None        # cuda.bindings.driver once a launch has imported it


def numba_type(dtype):
    from numba.cuda import types as nt
    return getattr(nt, dtype.np.name)


def array_type(dtype, ndim: int, contiguous: bool):
    from numba.cuda import types as nt
    return nt.Array(numba_type(dtype), ndim, "C" if contiguous else "A")


def scalar_type(py_type):
    from numba.cuda import types as nt
    return {int: nt.int64, float: nt.float32, bool: nt.boolean}[py_type]


def python_kernel(source: str, name: str, tables: dict):
    """The generated source's kernel `name` as a Python function, for numba-cuda to compile.
    `tables`: the constant tables' arrays, by the global names the source uses."""
    from numba import cuda
    from numba.cuda import types as nt
    from .vector_access import intrinsics
    namespace = {"cuda": cuda, "math": math, "__types": nt, "__f32": nt.float32, **intrinsics(), **tables}
    exec(compile(source, f"<simt kernel {name}>", "exec"), namespace)
    return namespace[name]


def compile_kernel(source: str, name: str, argtypes: tuple, device_index: int, tables: dict, launch_bounds=None):
    """Compile the generated source for these argument types; returns the launchable kernel.
    `launch_bounds`: None or (threads a block, blocks an SM), as numba-cuda takes them."""
    from numba import cuda
    fn = python_kernel(source, name, tables)
    bounds = {"launch_bounds": launch_bounds} if launch_bounds else {}
    with cuda.gpus[device_index]:
        dispatcher = cuda.jit(argtypes, **bounds)(fn)       # compiles now, for these types only
        overload = dispatcher.compile(argtypes)            # the specialized kernel (numba's _Kernel)
        return Compiled(overload._codelibrary.get_cufunc().kernel)   # numba's cuda.core Kernel (a CUkernel)


def _stream(handle: int):
    s = _STREAMS.get(handle)
    if s is None:
        from cuda.bindings import driver
        s = _STREAMS[handle] = driver.CUstream(handle)
    return s


DATA_FIELD = 4        # an array's data pointer among its fields (array_args)


def array_args(t, out: list) -> None:
    itemsize = t.element_size()
    out += (0, 0, t.numel(), itemsize, t.data_ptr(), *t.shape, *(s * itemsize for s in t.stride()))


def scalar_arg(value, py_type):
    if py_type is int:
        return ctypes.c_int64(value)
    if py_type is float:
        return ctypes.c_float(value)
    return ctypes.c_uint8(bool(value))


class Params:
    """A launch's kernel parameters, marshalled once: C values and the `void**` array pointing at
    them, as cuLaunchKernel takes them (the driver copies the values at each launch, so a plan
    reuses one Params for every launch of its layout). Python ints are 64-bit, as numba's array
    ABI fields (pointers, sizes, shapes, strides) are."""
    __slots__ = ("values", "array", "address")

    def __init__(self, args: list):
        self.values = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_int64(a) for a in args]
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(*[ctypes.addressof(v) for v in self.values])
        self.address = ctypes.addressof(self.array)

    def __len__(self) -> int:
        return len(self.values)


class Compiled:
    """A compiled specialization: the CUkernel (for its attributes) and the handle cuLaunchKernel takes."""
    __slots__ = ("kernel", "function", "dynamic_shared")

    def __init__(self, kernel):
        from cuda.bindings import driver
        self.kernel = kernel
        self.function = driver.CUfunction(int(kernel.handle))   # a CUkernel launches as a CUfunction
        self.dynamic_shared = 0      # the dynamic shared memory this kernel was allowed above 48 KiB


def allow_dynamic_shared(compiled: Compiled, nbytes: int, device_index: int) -> None:
    """Opt the kernel in to `nbytes` of dynamic shared memory (CUDA needs it above 48 KiB a block)."""
    if nbytes <= compiled.dynamic_shared:
        return
    from cuda.bindings import driver
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    _check(driver.cuKernelSetAttribute(attr, nbytes, compiled.kernel.handle, device_index)[0], "allow",
           f"{nbytes} bytes of dynamic shared memory")
    compiled.dynamic_shared = nbytes


def config(grid: tuple, block: tuple, shared: int = 0) -> tuple:
    """cuLaunchKernel's launch dimensions and dynamic shared memory (bytes), in its argument order."""
    return (*grid, *block, shared)


def launch(compiled: Compiled, launch_config: tuple, stream_handle: int, params: Params) -> None:
    """Start the kernel on the stream: one driver call with the prebuilt parameter array (cuda.bindings'
    call measured 4.9 µs of host time on the H200, libcuda's own symbol called by ctypes 5.9 µs)."""
    driver = _DRIVER or _import_driver()     # an import statement here cost ~1 us a launch
    gx, gy, gz, bx, by, bz, shared = launch_config
    stream = _STREAMS.get(stream_handle) or _stream(stream_handle)
    err = driver.cuLaunchKernel(compiled.function, gx, gy, gz, bx, by, bz, shared, stream, params.address, 0)[0]
    if err:
        _check(err, "launch", f"a grid of {(gx, gy, gz)} blocks of {(bx, by, bz)} threads with {shared} bytes of "
                              "dynamic shared memory")


def current_device() -> int:
    """The current CUDA device's index (torch's, without torch.cuda's Python wrapper)."""
    return torch._C._cuda_getDevice()


def current_stream(index: int) -> int:
    """The raw handle of torch's current stream on device `index` (no torch Stream object made)."""
    return torch._C._cuda_getCurrentRawStream(index)


def _import_driver():
    """cuda.bindings' driver module, imported at the first launch (a CPU-only install has none)."""
    global _DRIVER
    from cuda.bindings import driver
    _DRIVER = driver
    return driver


def _check(err, what: str, detail: str) -> None:
    """`err`: the CUresult a cuda.bindings driver call returned."""
    from cuda.bindings import driver
    if err != driver.CUresult.CUDA_SUCCESS:
        from ..errors import LaunchError
        raise LaunchError(f"the CUDA driver could not {what} the SIMT kernel ({detail}): {err.name}",
                          help="this is a tilesafe bug if the launch passed its checks; please report it")
