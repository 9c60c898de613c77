"""The engine's fused kernels — q/k norm + RoPE, and with the paged K/V write (decode) —
compile for Hopper (sm_90) at Qwen3-4B's shapes on any machine, as
`test_kernels_hopper_compile.py` checks the other library kernels (launches replaced by
`compile_ahead` on specs of the same views: no GPU needed). The paged attention's GPU tests
are in tests/gpu/test_paged_kv_gpu.py."""
import os

import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.runtime.compile_ahead import compile_ahead

from compile_launches import compile_launches

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 interprets Triton's own library: it cannot compile")

H200_SHARED = 232448
MODULES = ["norm_rope", "norm_rope_kv", "linear_fusions", "linear_argmax"]
BF = torch.bfloat16
H, HKV, D, SLOTS, L = 32, 8, 128, 32, 4096          # Qwen3-4B heads; a cache of 32 slots of 4096


@pytest.fixture
def compiled(monkeypatch):
    return compile_launches(monkeypatch, MODULES, lambda kernel, specs, schedule: compile_ahead(
        kernel, **specs, arch=90, descriptors=None, schedule=schedule))


def e(*shape, dtype=BF):
    return torch.empty(shape, dtype=dtype)


def decode_prologue(batch):
    qkv = e(batch, H + 2 * HKV, D)
    ints = torch.zeros(batch, dtype=torch.int32)
    tk.norm_rope_kv_write(qkv[:, :H], qkv[:, H:H + HKV], qkv[:, H + HKV:], e(D), e(D), ints, ints,
                          e(SLOTS, L, HKV, D), e(SLOTS, L, HKV, D), q_out=e(batch, H, D))


CALLS = {
    "norm_rope_prefill": lambda: tk.norm_rope(e(2048, H + 2 * HKV, D)[:, :H], e(D),
                                              torch.zeros(2048, dtype=torch.int32)),
    "decode_prologue_b1": lambda: decode_prologue(1),
    "decode_prologue_b32": lambda: decode_prologue(32),
    # The fused decode GEMVs at Qwen3-4B's shapes (E 2560, I 9728), one row and eight.
    "qkv_norm_prologue_b1": lambda: tk.rms_norm_linear(e(1, 2560), e(2560), e((H + 2 * HKV) * D, 2560)),
    "gate_up_norm_prologue_b8": lambda: tk.rms_norm_linear(e(8, 2560), e(2560), e(19456, 2560)),
    "o_residual_b1": lambda: tk.linear(e(1, H * D), e(2560, H * D), residual=e(1, 2560)),
    "down_silu_mul_residual_b1": lambda: tk.silu_mul_linear(e(1, 19456), e(2560, 9728), residual=e(1, 2560)),
    "down_silu_mul_residual_b8": lambda: tk.silu_mul_linear(e(8, 19456), e(2560, 9728), residual=e(8, 2560)),
    "lm_head_argmax_b1": lambda: tk.linear_argmax(e(1, 2560), e(151936, 2560), norm_weight=e(2560)),
    "lm_head_argmax_b8": lambda: tk.linear_argmax(e(8, 2560), e(151936, 2560), norm_weight=e(2560)),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_engine_kernel_compiles_for_hopper(compiled, call):
    CALLS[call]()
    assert compiled, "no kernel was launched"
    for name, k in compiled:
        assert k.metadata.shared <= H200_SHARED, (name, k.metadata.shared)
