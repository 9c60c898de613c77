"""Compile-only checks for Hopper (sm_90) on any machine: `triton.compile` of the generated
GEMMs in bf16 uses tensor-core `wgmma`, and with tensor descriptors TMA
(`cp.async.bulk.tensor`). No GPU is needed to compile to PTX."""
import os

import pytest

import tilesafe as ts
from tilesafe.runtime.compile_ahead import compile_ahead
from triton_helpers import gemm as matmul, persistent_gemm as pmatmul

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")


def _ptx(kernel, descriptors: bool) -> str:
    specs = (ts.spec((1024, 512), ts.bf16, tile=(128, 128)), ts.spec((1024, 768), ts.bf16),
             ts.spec((768, 512), ts.bf16))
    return compile_ahead(kernel, *specs, BK=64, arch=90, descriptors=descriptors).asm["ptx"]


@pytest.mark.parametrize("kernel", [matmul, pmatmul], ids=["tiled", "persistent"])
def test_bf16_gemm_uses_wgmma_and_tma(kernel):
    ptx = _ptx(kernel, descriptors=True)
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx


@pytest.mark.parametrize("kernel", [matmul, pmatmul], ids=["tiled", "persistent"])
def test_bf16_gemm_pointer_path_uses_wgmma(kernel):
    ptx = _ptx(kernel, descriptors=False)
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" not in ptx


def test_transposed_weight_is_loaded_through_tma_as_its_transpose():
    """x @ w.T with w (N, K) row-major: b = w.T has contiguous columns, so its descriptor
    describes w itself and the tiles are transposed in registers."""
    specs = (ts.spec((1024, 512), ts.bf16, tile=(128, 128)), ts.spec((1024, 768), ts.bf16),
             ts.spec((768, 512), ts.bf16, strides=(1, 768)))
    compiled = compile_ahead(matmul, *specs, BK=64, arch=90, descriptors=True)
    assert "wgmma.mma_async" in compiled.asm["ptx"]
    assert compiled.asm["ptx"].count("cp.async.bulk.tensor.2d") >= 2   # a and b (c stores may use it too)


def test_forced_tma_reaches_4d_attention_tensors_with_ragged_lengths():
    """flash_kernel on (B, H, S, D) tensors whose length (1000) does not divide the tiles:
    with TMA forced, q, k, v and o go through 4-D / 3-D descriptors (TMA zero-fills the edge)."""
    from tilesafe.kernels.attention import flash_kernel
    bf = ts.bf16
    k = compile_ahead(flash_kernel, ts.spec((32, 1000, 128), bf, tile=(1, 64, 128)), ts.spec((1, 32, 1000, 128), bf),
                      ts.spec((1, 8, 1000, 128), bf), ts.spec((1, 8, 1000, 128), bf), qk_scale=0.1, CAUSAL=True,
                      NEG_SCALE=False, GROUP=4, BN=64, arch=90, schedule=ts.schedule(num_warps=4, tma=True),
                      descriptors=None)
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor.4d" in ptx
