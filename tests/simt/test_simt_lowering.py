"""The numba-cuda lowering: what the generated source does, and that numba runs it.

No GPU (and no NVVM) here, so the generated kernels run under numba's CUDA simulator, in a
process of their own (the simulator is chosen when numba-cuda is imported)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilesafe.simt.examples.histogram import histogram
from tilesafe.simt.examples.sgemm import sgemm
from tilesafe.simt.examples.vector_add import vector_add

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_examples_run_under_the_numba_simulator():
    pytest.importorskip("numba_cuda", reason="numba-cuda (the `simt` extra) is not installed")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("simulate_lowering.py"))], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    names = ["vector_add", "vector_add_chunked", "vector_add_runs", "histogram", "histogram256", "transpose", "sgemm",
             "sgemm_sanitized", "constant_table", "block_sum", "sum_all", "sum_all_wide", "softmax_rows",
             "row_rotate_dynamic", "shared_sanitizer_flag", "unsafe_write_mask", "histogram_flag", "checked_read_flag"]
    assert done.stdout.split() == [w for n in names for w in ("ok", n)], done.stdout


def body(kernel, *args, **kwargs) -> str:
    source = kernel.numba_source(*args, **kwargs)
    return source[source.index(f"def simt_{kernel.name}"):]


def test_proven_reads_are_plain_and_the_permit_is_an_index_computation():
    text = body(vector_add, torch.empty(10), torch.ones(10), torch.ones(10))
    assert "p__0 = cuda.blockIdx.x * 256 + cuda.threadIdx.x" in text
    assert "if p__0 < out.shape[0]:" in text
    assert "__put1(out, p__0, __at1(x, p__0) + __at1(y, p__0))" in text     # no check (nor wraparound): x, y and
                                                                             # out share N


def test_unproven_reads_are_checked_with_the_kernel_line():
    text = body(histogram, torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32), grid=(1,))
    line = histogram.src.loc(histogram.info.atomics[0]).line
    assert f"__atomic_add(hist, __ld1(x, i, __bad, {line}), 1, __err, {line})" in text


def test_shared_reads_in_static_range_need_no_check_and_floats_are_f32():
    text = body(sgemm, torch.empty(4, 4), torch.ones(4, 4), torch.ones(4, 4))
    assert "acc += __at2(a_s, ty, kk) * __at2(b_s, kk, tx)" in text
    assert "acc = __f32(0.0)" in text
    assert "cuda.syncthreads()" in text
