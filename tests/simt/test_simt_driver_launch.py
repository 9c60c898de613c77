"""The GPU launch path's host side, checked without a GPU: the parameter array a layout marshals
once (numba's array ABI fields as 64-bit values, f32 and bool scalars at their own sizes), and
that the one driver call, cuLaunchKernel, accepts the arguments we give it (the binding converts
them before it looks for the driver: a TypeError here is our bug; a missing driver is not), and
that a failed call is a LaunchError naming the driver's result."""
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
        function = driver.CUfunction(0)
    params = gpu_launch.Params([0, 0, 1, 4, 0, 1, 4])
    try:
        gpu_launch.launch(Fake(), gpu_launch.config((1, 1, 1), (32, 1, 1)), 0, params)
    except TypeError as e:                            # the binding refused an argument: our bug
        pytest.fail(f"cuLaunchKernel's binding refused an argument: {e}")
    except Exception:                                 # no driver here, or (on a GPU) an invalid handle
        pass


def test_a_failed_driver_call_is_a_launch_error_naming_the_result(monkeypatch):
    driver = pytest.importorskip("cuda.bindings.driver")

    class Driver:                                     # the driver module, its call failing
        CUresult = driver.CUresult

        @staticmethod
        def cuLaunchKernel(*args):
            return (driver.CUresult.CUDA_ERROR_INVALID_HANDLE, None)
    monkeypatch.setattr(gpu_launch, "_DRIVER", Driver)

    class Fake:
        function = driver.CUfunction(0)
    with pytest.raises(ts.LaunchError, match=r"could not launch the SIMT kernel \(a grid of \(1, 1, 1\) blocks of "
                                             r"\(32, 1, 1\) threads .*\): CUDA_ERROR_INVALID_HANDLE"):
        gpu_launch.launch(Fake(), gpu_launch.config((1, 1, 1), (32, 1, 1)), 0, gpu_launch.Params([0]))
