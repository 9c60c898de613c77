"""Every test here runs its launches through the generated Triton: under Triton's CPU
interpreter (`triton-interpreter`) always, and on the GPU (`triton`) when CUDA is present,
against NumPy oracles written in the test. Grids stay tiny: the interpreter runs each
program in Python. The interpreter computes bf16 wrongly and mis-casts fp8 (DESIGN §5), so a
test whose `dtype` is one of those runs on the GPU only."""
import pytest
import torch

import tilesafe as ts

BACKENDS = ["triton-interpreter"] + (["triton"] if torch.cuda.is_available() else [])
GPU_ONLY_DTYPES = ("bf16", "f8e4m3fn", "f8e5m2")


def pytest_configure(config):
    config.addinivalue_line("markers", "interpreter_only: about the CPU interpreter path itself")


@pytest.fixture(autouse=True, params=BACKENDS)
def triton_backend(request):
    name = request.param
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if name == "triton-interpreter" and params.get("dtype") in GPU_ONLY_DTYPES:
        pytest.skip("Triton's interpreter cannot run bf16/fp8; this case runs on the GPU")
    if name == "triton" and request.node.get_closest_marker("interpreter_only"):
        pytest.skip("about the interpreter")
    with ts.backend(name):
        yield name
