"""The differential kernel fuzzer on the GPU (run with `pytest -m gpu`): the fuzzer's random
kernels through Triton on CUDA tensors against the reference backend (sanitizer on) on CPU
tensors and the NumPy oracle. The programs, cases and checks are tests/fuzz's; the budget is
the fuzz profile's (TILESAFE_FUZZ_PROFILE=long for a hunt), small by default.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given

import tilesafe as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import kernel_gen  # noqa: E402
import kernel_run  # noqa: E402
from fuzz_profiles import fuzz_settings  # noqa: E402
from kernel_cases import cases  # noqa: E402
from test_finds import _never_taken_branch  # noqa: E402  (the find's kernel, one definition)

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


@pytest.mark.xfail(strict=True, raises=ts.CompileError,
                   reason="NEW (tests/fuzz/test_finds.py): Triton 3.6 crashes in TritonGPUCoalesce on a branch whose "
                          "condition it folds (tl.program_id(0) != tl.program_id(0))")
def test_a_never_taken_branch_runs_on_the_gpu():
    z = ts.full((10,), float("nan"), device="cuda")
    x = ts.tensor(np.arange(1, 11, dtype=np.float32), device="cuda")
    got = _never_taken_branch(z.partition((4,)), x, s=0).sync().unpartition().numpy()
    np.testing.assert_array_equal(got, np.zeros(10, np.float32))
