"""The GPU launch path's host side, checked without a GPU: the parameter array a layout marshals
once (numba's array ABI fields as 64-bit values, f32 and bool scalars at their own sizes), and
that the one driver call, cuLaunchKernel, accepts the arguments we give it (the binding converts
them before it looks for the driver: a TypeError here is our bug; a missing driver is not), and
that the ctypes call passes them at cuLaunchKernel's C types."""
import ctypes

import pytest
import torch

import tilesafe as ts
from tilesafe.simt import gpu_launch


def values(params):
    slots = (ctypes.c_void_p * len(params)).from_address(params.address)
    return [ctypes.cast(slots[i], ctypes.POINTER(type(v))).contents.value for i, v in enumerate(params.values)]


def test_a_layout_marshals_numba_array_fields_and_scalars_once():
    t = torch.zeros(6, 4)[:, 1]                       # a strided view: strides in bytes
    args: list = []
    gpu_launch.array_args(t, args)
    args += [gpu_launch.scalar_arg(0.5, float), gpu_launch.scalar_arg(True, bool), gpu_launch.scalar_arg(-3, int)]
    params = gpu_launch.Params(args)
    assert values(params) == [0, 0, 6, 4, t.data_ptr(), 6, 16, 0.5, 1, -3]
    assert [ctypes.sizeof(v) for v in params.values] == [8] * 7 + [4, 1, 8]


def test_config_is_cuLaunchKernels_dimensions_and_shared_bytes():
    assert gpu_launch.config((3, 2, 1), (64, 1, 1), 4096) == (3, 2, 1, 64, 1, 1, 4096)
    assert gpu_launch.config((1, 1, 1), (32, 1, 1)) == (1, 1, 1, 32, 1, 1, 0)


def test_the_driver_call_takes_our_arguments():
    driver = pytest.importorskip("cuda.bindings.driver")

    class Fake:                                       # a compiled kernel whose handle is no kernel
        function, handle = driver.CUfunction(0), 0
    params = gpu_launch.Params([0, 0, 1, 4, 0, 1, 4])
    try:
        gpu_launch.launch(Fake(), gpu_launch.config((1, 1, 1), (32, 1, 1)), 0, params)
    except TypeError as e:                            # the binding refused an argument: our bug
        pytest.fail(f"cuLaunchKernel's binding refused an argument: {e}")
    except Exception:                                 # no driver here, or (on a GPU) an invalid handle
        pass


def test_a_failed_driver_call_is_a_launch_error_naming_the_result(monkeypatch):
    pytest.importorskip("cuda.bindings.driver")
    monkeypatch.setattr(gpu_launch, "_LAUNCH", lambda compiled, cfg, stream, address: 400)   # as ctypes returns it
    params = gpu_launch.Params([0])
    with pytest.raises(ts.LaunchError, match=r"could not launch the SIMT kernel \(a grid of \(1, 1, 1\) blocks of "
                                             r"\(32, 1, 1\) threads .*\): CUDA_ERROR_INVALID_HANDLE"):
        gpu_launch.launch(None, gpu_launch.config((1, 1, 1), (32, 1, 1)), 0, params)


def test_the_ctypes_launcher_passes_cuLaunchKernels_arguments_at_their_c_types():
    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, *[ctypes.c_void_p] * 3)
    fake = proto(lambda *a: seen.append(a) or 0)          # libcuda's symbol, stood in for by a C callback

    class Compiled:
        handle = 0x7F00_0000_1234                          # a 64-bit handle survives the call
    launch = gpu_launch.ctypes_launcher(ctypes.cast(fake, proto))
    params = gpu_launch.Params([1, 2])
    assert launch(Compiled(), (3, 2, 1, 128, 1, 1, 4096), 0x7F00_0000_5678, params.address) == 0
    assert seen == [(0x7F00_0000_1234, 3, 2, 1, 128, 1, 1, 4096, 0x7F00_0000_5678, params.address, None)]
