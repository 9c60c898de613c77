"""The differential kernel fuzzer on the GPU (run with `pytest -m gpu`): the fuzzer's random
kernels through Triton on CUDA tensors against the reference backend (sanitizer on) on CPU
tensors and the NumPy oracle. The programs, cases and checks are tests/fuzz's; the budget is
the fuzz profile's (TILESAFE_FUZZ_PROFILE=long for a hunt), small by default.
"""
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given

import tilesafe as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import kernel_gen  # noqa: E402
import kernel_run  # noqa: E402
from fuzz_profiles import fuzz_settings  # noqa: E402
from kernel_cases import cases  # noqa: E402

pytestmark = pytest.mark.gpu


@fuzz_settings(25)
@given(case=cases())
def test_random_kernels_agree_on_the_gpu(case):
    try:
        kernel = kernel_gen.define(case.program)
    except ts.KernelError:
        assume(False)
    start = kernel_run.arrays(case)
    outcomes = {"reference": kernel_run.run(kernel, case, start, "reference", device="cpu"),
                "triton": kernel_run.run(kernel, case, start, "triton", device="cuda")}
    found = kernel_run.failures(case, start, outcomes)
    assert not found, kernel_run.report(case, found)
