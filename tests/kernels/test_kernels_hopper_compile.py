"""Every library kernel, as the public functions launch it on a GPU (GPU config table, bf16,
realistic LLM shapes), compiles for Hopper (sm_90) on any machine: GEMM-like kernels use
tensor-core `wgmma`, and no kernel needs more shared memory than an H200 block has.

The public functions run with the `triton` backend's configs, but each launch is replaced
by `compile_ahead` on `ts.spec`s of the same views, so no GPU and no memory traffic is needed.
"""
import math
import os
import re

import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.kernels import configs
from tilesafe.runtime.compile_ahead import compile_ahead

from compile_launches import compile_launches

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")

H200_SHARED = 232448          # bytes of shared memory one block may use on sm_90
MODULES = ["elementwise", "reduce", "norms", "matmul", "attention", "rope"]
BF = torch.bfloat16


@pytest.fixture
def compiled(monkeypatch):
    """Run public functions with GPU configs; collect (kernel name, Triton compiled kernel)."""
    return compile_launches(monkeypatch, MODULES, lambda kernel, specs, schedule: compile_ahead(
        kernel, **specs, arch=90, descriptors=None, schedule=schedule))


def e(*shape, dtype=BF):
    return torch.empty(shape, dtype=dtype)


CALLS = {
    "add_bias_row": lambda: tk.add(e(4096, 2560), e(2560)),
    "silu_mul": lambda: tk.silu_mul(e(4096, 9728), e(4096, 9728)),
    "residual_add_in_place": lambda: (lambda h: tk.residual_add(h, e(4096, 2560), out=h))(e(4096, 2560)),
    "softmax_vocab": lambda: tk.softmax(e(4, 151936, dtype=torch.float32)),
    "softmax_rows": lambda: tk.softmax(e(32, 2048, 2048)),
    "sum": lambda: tk.sum(e(4096, 2560)),
    "rms_norm_residual": lambda: tk.rms_norm(e(4096, 2560), e(2560), residual=e(4096, 2560)),
    "rms_norm_residual_in_place": lambda: (lambda r: tk.rms_norm(e(1, 2560), e(2560), residual=r, residual_out=r))(
        e(1, 2560)),
    "layer_norm": lambda: tk.layer_norm(e(4096, 5120), e(5120), e(5120)),
    "matmul": lambda: tk.matmul(e(4096, 4096), e(4096, 4096)),
    "matmul_tiled_bias_silu": lambda: tk.matmul(e(512, 1024), e(1024, 512), bias=e(512), activation="silu"),
    "linear_gemv": lambda: tk.linear(e(1, 2560), e(9728, 2560)),
    "linear_m16": lambda: tk.linear(e(16, 2560), e(9728, 2560)),
    "linear_gemv_split_k": lambda: tk.linear(e(1, 9728), e(2560, 9728)),     # 2560 outputs: K split
    "linear_m128_split_k": lambda: tk.linear(e(128, 4096), e(2560, 4096), config={"split_k": 4}),
    # S16: the last split of each output tile adds the splits up (one launch)
    "linear_m83_split_k_one_kernel": lambda: tk.linear(e(83, 3584), e(4608, 3584), config={
        "block_m": 128, "block_n": 128, "block_k": 64, "split_k": 3, "one_kernel": True, "num_warps": 8,
        "num_stages": 4}),
    "linear_gemv_split_k_one_kernel": lambda: tk.linear(e(1, 9728), e(2560, 9728), config={"one_kernel": True}),
    "linear_m128_tail_columns": lambda: tk.linear(e(128, 5120), e(10240, 5120), config={
        "block_m": 128, "block_n": 64, "block_k": 64, "tail_split": True, "persistent": False, "num_warps": 4,
        "num_stages": 6}),
    "bmm": lambda: tk.bmm(e(8, 1024, 512), e(8, 512, 1024)),
    "flash_causal_gqa": lambda: tk.flash_attention(e(1, 32, 2048, 128), e(1, 8, 2048, 128), e(1, 8, 2048, 128), True),
    "flash_ragged": lambda: tk.flash_attention(e(2, 32, 1500, 128), e(2, 8, 1500, 128), e(2, 8, 1500, 128)),
    "decode_gqa": lambda: tk.decode_attention(e(32, 128), e(8, 4096, 128), e(8, 4096, 128), 1000,
                                              config={"one_kernel": False}),
    "decode_gqa_one_kernel": lambda: tk.decode_attention(e(32, 128), e(8, 4096, 128), e(8, 4096, 128), 1000,
                                                         config={"one_kernel": True}),
    "rope": lambda: tk.rope(e(2048, 32, 128), torch.zeros(2048, dtype=torch.int64)),
    "embedding": lambda: tk.embedding(torch.zeros(2048, dtype=torch.int64), e(8192, 2560)),
    "argmax_vocab": lambda: tk.argmax(e(1, 151936)),
}
TENSOR_CORES = {"matmul", "matmul_tiled_bias_silu", "bmm", "flash_causal_gqa", "flash_ragged",
                "linear_m128_split_k", "linear_m128_tail_columns", "linear_m83_split_k_one_kernel"}
TMA = {"matmul", "matmul_tiled_bias_silu",   # 2-D GEMM operands (w.T too) through TMA
       "flash_causal_gqa", "decode_gqa", "decode_gqa_one_kernel",   # q, k, v / the caches read as 2-D matrices
       "flash_ragged"}                  # ragged lengths: q, k, v as 4-D tensors through rank-4 descriptors
POINTERS = {"linear_m16"}   # the 2..16-row tensor-core path: cp.async, faster than TMA there (configs.GPU_DEFAULTS)


@pytest.mark.parametrize("call", list(CALLS))
def test_compiles_for_hopper(compiled, call):
    CALLS[call]()
    assert compiled, "no kernel was launched"
    for name, k in compiled:
        assert k.metadata.shared <= H200_SHARED, (name, k.metadata.shared)
        if call in TENSOR_CORES and name not in ("unary_kernel", "split_sum_kernel"):
            assert "wgmma.mma_async" in k.asm["ptx"], name
        if call in TMA and name not in ("split_sum_kernel", "decode_combine_kernel"):   # they multiply nothing
            assert "cp.async.bulk.tensor" in k.asm["ptx"], name
        if call in POINTERS:
            assert "cp.async.bulk.tensor" not in k.asm["ptx"] and "cp.async" in k.asm["ptx"], name
        # the kernels of a split computation launch with PDL: they wait for the kernel before
        # them before any memory access, and let the next one launch early
        pdl = name in ("split_k_kernel", "split_sum_kernel", "split_k_last_kernel", "decode_rows_kernel", "decode_partial_kernel",
                       "decode_combine_kernel", "row_stats_kernel", "softmax_apply_kernel", "decode_rows_last_kernel")
        # S16: the one-kernel decode's blocks take one acquire-release ticket each
        assert ("atom.global.gpu.acq_rel" in k.asm["ptx"]) == name.endswith("_last_kernel"), name
        assert ("griddepcontrol.wait" in k.asm["ptx"]) == pdl, name
        assert ("griddepcontrol.launch_dependents" in k.asm["ptx"]) == pdl, name


def test_a_column_tail_split_launches_whole_waves_then_the_split_columns(compiled):
    CALLS["linear_m128_tail_columns"]()
    assert [name for name, _ in compiled] == ["mm_kernel", "split_k_kernel", "split_sum_kernel"]


def test_one_kernel_decode_launches_one_kernel(compiled):
    CALLS["decode_gqa_one_kernel"]()
    assert [name for name, _ in compiled] == ["decode_rows_last_kernel"]


def test_split_k_launches_partials_then_their_sum(compiled):
    CALLS["linear_m128_split_k"]()
    assert [name for name, _ in compiled] == ["split_k_kernel", "split_sum_kernel"]


def test_one_kernel_split_k_launches_one_kernel(compiled):
    CALLS["linear_m83_split_k_one_kernel"]()
    assert [name for name, _ in compiled] == ["split_k_last_kernel"]


def test_the_config_schedule_reaches_the_compiled_kernel(compiled):
    tk.matmul(e(4096, 4096), e(4096, 4096))
    (name, k), = compiled
    cfg = configs.GPU_DEFAULTS["matmul"]
    assert (k.metadata.num_warps, k.metadata.num_stages) == (cfg["num_warps"], cfg["num_stages"])


def _large_f32_layout_changes(ttgir: str, elems: int = 4096) -> list[str]:
    """The `convert_layout`s that move an fp32 tensor of `elems` values or more."""
    found = []
    for shape in re.findall(r"ttg\.convert_layout %\S+ : tensor<([0-9x]+)xf32,", ttgir):
        if math.prod(int(n) for n in shape.split("x")) >= elems:
            found.append(shape)
    return found


@pytest.mark.parametrize("call", list(CALLS))
def test_no_kernel_moves_a_whole_fp32_tile_between_layouts(compiled, call):
    """A layout change goes through shared memory with a barrier per round: results are cast
    before they are reshaped for the store (flash, bmm), and a small operand is loaded before
    the tile it is combined with (the long softmax's pass), so only small values move."""
    CALLS[call]()
    for name, k in compiled:
        if name not in ("split_k_kernel", "split_k_last_kernel"):   # their fp32 partials leave the MMA layout
            #                                                          as any fp32 GEMM store does
            assert _large_f32_layout_changes(k.asm["ttgir"]) == [], name


WARPS_8 = {"num_warps": 8}
CONFIGURED = {
    "rms_norm": lambda: tk.rms_norm(e(64, 2560), e(2560), config=WARPS_8),
    "rms_norm_residual": lambda: tk.rms_norm(e(64, 2560), e(2560), residual=e(64, 2560), config=WARPS_8),
    "rms_norm_long_residual": lambda: tk.rms_norm(e(4, 40000), e(40000), residual=e(4, 40000), config=WARPS_8),
    "layer_norm": lambda: tk.layer_norm(e(64, 5120), e(5120), e(5120), config=WARPS_8),
    "softmax_vocab": lambda: tk.softmax(e(4, 151936, dtype=torch.float32), config=WARPS_8),
    "rope": lambda: tk.rope(e(64, 32, 128), torch.zeros(64, dtype=torch.int64), config=WARPS_8),
    "embedding": lambda: tk.embedding(torch.zeros(64, dtype=torch.int64), e(8192, 2560), config=WARPS_8),
    "argmax_vocab": lambda: tk.argmax(e(1, 151936), config=WARPS_8),
}


@pytest.mark.parametrize("call", list(CONFIGURED))
def test_a_configs_warps_reach_every_kernel_it_tiles(compiled, call):
    """`config={"num_warps": 8}` compiles each kernel the config tiles with 8 warps (the
    small final kernels of a split computation keep Triton's default)."""
    CONFIGURED[call]()
    tiled = [(name, k) for name, k in compiled if name != "argmax_final_kernel"]
    assert tiled and all(k.metadata.num_warps == 8 for _, k in tiled), [(n, k.metadata.num_warps) for n, k in tiled]


def test_a_tile_stored_through_tma_keeps_its_mma_layout(compiled):
    """bmm's result gains a unit batch axis for its rank-3 TMA store: the reshape keeps the
    MMA layout, with no layout change through shared memory first (a subscript made one,
    and the kernel 3% slower than its twin on the H200)."""
    tk.bmm(e(64, 1024, 128), e(64, 128, 1024), config={"tma": True, "persistent": True})
    (name, k), = compiled
    assert name == "bmm_persistent_kernel" and "cp.async.bulk.tensor.3d.global.shared" in k.asm["ptx"]
    assert "convert_layout" not in k.asm["ttgir"]
