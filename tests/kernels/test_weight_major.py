"""The weight-major product of a few rows (kernels/weight_major.py): `linear` with config
`weight_major` computes each output tile transposed (the weight as the MMA's wide operand),
over all of K or in K splits added up by the last split to finish."""
import importlib
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn

WM = importlib.import_module("tilesafe.kernels.weight_major")
GM = importlib.import_module("tilesafe.kernels.gemm_model")
MM_TOL = {"f32": dict(rtol=1e-4, atol=1e-4), "f16": dict(rtol=2e-2, atol=2e-2), "bf16": dict(rtol=5e-2, atol=5e-2)}


def t64(x):
    return x.double().cpu()


def launches(monkeypatch) -> list:
    """The names of the kernels weight_major launches, in order."""
    names, real = [], WM.launch
    monkeypatch.setattr(WM, "launch", lambda kernel, outputs, **kw: (names.append(kernel.name),
                                                                     real(kernel, outputs, **kw))[1])
    return names


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("m", [2, 5, 16, 40])
def test_rows_by_a_ragged_weight_in_one_pass(backend, device, monkeypatch, m, dtype):
    """N = 72 and K = 150 (ragged column and K tiles; the rows padded to a power of two of >= 16,
    the padding masked), bias and activation in the epilogue."""
    x, w = randn((m, 150), dtype, 40, device), randn((72, 150), dtype, 41, device)
    bias = randn((72,), dtype, 42, device)
    names = launches(monkeypatch)
    out = poisoned((m, 72), dtype, device)
    got = tk.linear(x, w, bias=bias, activation="silu", out=out, config={"weight_major": True, "split_k": 1})
    assert got is out and names == ["weight_major_kernel"]
    assert_close(got, F.silu(F.linear(t64(x), t64(w), t64(bias))), dtype, **MM_TOL[dtype])


@pytest.mark.parametrize("m, splits, dtype", [(3, 2, "f32"), (16, 3, "f32"), (33, 5, "bf16"), (7, 50, "f32"),
                                              (130, 2, "f32")])      # 130 rows: two row tiles of 128
def test_k_splits_add_up_in_the_last_block(backend, device, monkeypatch, m, splits, dtype):
    """K = 150 in tiles of 32 (5 tiles) over 2, 3 (a ragged last split) or all 5 splits (50
    asks for more): one launch, whose last split of each tile adds the partials up; the same
    bits again on a second call (the tickets are back at zero)."""
    x, w = randn((m, 150), dtype, 43, device), randn((72, 150), dtype, 44, device)
    bias = randn((72,), dtype, 45, device)
    cfg = {"weight_major": True, "split_k": splits, "block_n": 32, "block_k": 32}
    names = launches(monkeypatch)
    out = poisoned((m, 72), dtype, device)
    got = tk.linear(x, w, bias=bias, activation="gelu", out=out, config=cfg)
    assert got is out and names == ["weight_major_split_kernel"]
    assert_close(got, F.gelu(F.linear(t64(x), t64(w), t64(bias)), approximate="tanh"), dtype, **MM_TOL[dtype])
    again = tk.linear(x, w, bias=bias, activation="gelu", out=poisoned((m, 72), dtype, device), config=cfg)
    assert np.array_equal(f64(again), f64(got))


def test_matmul_takes_it_too_through_strides(backend, device):
    """matmul(a, b) with b a transposed view (K, N) of a row-major weight: read in place."""
    a, w = randn((4, 64), "f32", 46, device), randn((48, 64), "f32", 47, device)
    got = tk.matmul(a, w.T, out=poisoned((4, 48), "f32", device), config={"weight_major": True})
    assert_close(got, t64(a) @ t64(w).T, "f32", **MM_TOL["f32"])


def test_one_row_keeps_the_gemv():
    """One row is the GEMV's (FMAs, no padded rows): `weight_major` is not taken there."""
    x, w = randn((1, 64), "f32", 48), randn((40, 64), "f32", 49)
    with ts.backend("reference"):
        got = tk.linear(x, w, config={"weight_major": True})
    assert_close(got, t64(x) @ t64(w).T, "f32", **MM_TOL["f32"])


@pytest.mark.parametrize("tiles, k_tiles, slots, want", [
    (96, 20, 264, 2),      # 6144 x 2560 in 64-row tiles, two blocks an SM: 2 splits, 192 blocks in one wave
    (40, 76, 264, 6),      # 2560 x 9728: 6 splits, 240 blocks
    (40, 76, 132, 3),      # ... one block an SM (128 rows): 3
    (304, 20, 264, 1),     # 19456 x 2560: the tiles fill a wave already
    (40, 8, 264, 2),       # a short K: each split keeps >= 4 K tiles
    (40, 3, 264, 1),
])
def test_automatic_splits_keep_one_wave(tiles, k_tiles, slots, want):
    assert GM.weight_major_splits(None, tiles, k_tiles, slots) == want
    assert GM.weight_major_splits(2, tiles, k_tiles, slots) == min(2, k_tiles)     # a config's count


def test_blocks_an_sm_runs_follow_the_pipelines_shared_memory():
    """H200: 228 KB an SM. 32 rows by 64 x 128 bf16 tiles in 4 stages take 96 KB: two blocks;
    128 rows (192 KB): one; 16 rows with 2 stages (40 KB): five, counted as four."""
    assert GM.weight_major_slots(32, 64, 128, 4, 2, 132, 228 * 1024) == 264
    assert GM.weight_major_slots(128, 64, 128, 4, 2, 132, 228 * 1024) == 132
    assert GM.weight_major_slots(16, 64, 128, 2, 2, 132, 228 * 1024) == 528


def test_stages_fit_the_shared_memory():
    assert GM.weight_major_stages(None, 16, 64, 128, 2) == GM.WEIGHT_MAJOR_STAGES == 4
    assert GM.weight_major_stages(8, 128, 128, 128, 2) == GM.WEIGHT_MAJOR_SMEM // (256 * 128 * 2) == 3
    assert GM.weight_major_stages(4, 128, 256, 256, 4) == 2


def test_the_rule_picks_it_for_its_rows_only(monkeypatch):
    """Where gemm_model.WEIGHT_MAJOR_ROWS says (the streaming rule's rows, 17..128), the model's
    config is weight-major: 64 weight rows by 128 K, the rows padded, the split that keeps one
    wave (as one launch), a pipeline that fits; outside it the rule is what it was."""
    from tilesafe.kernels import config_model as cm
    from tilesafe.kernels import configs
    monkeypatch.setattr(GM, "WEIGHT_MAJOR_ROWS", (0, 0))
    before = {m: GM.streaming_choice(cm.Gemm(m, 6144, 2560, "bf16"), cm.H200) for m in (32, 72)}
    assert not before[32].get("weight_major")
    monkeypatch.setattr(GM, "WEIGHT_MAJOR_ROWS", (17, 64))
    assert GM.streaming_choice(cm.Gemm(72, 6144, 2560, "bf16"), cm.H200) == before[72]
    for m, n, k, want in [(32, 6144, 2560, (32, 64, 128, 2, True)), (64, 2560, 9728, (64, 64, 128, 3, True)),
                          (17, 19456, 2560, (32, 64, 128, 1, False))]:
        c = GM.streaming_choice(cm.Gemm(m, n, k, "bf16"), cm.H200)
        assert c["weight_major"] and (c["block_m"], c["block_n"], c["block_k"], c["split_k"], c["one_kernel"]) == want
        assert cm.valid(cm.Gemm(m, n, k, "bf16"), c, cm.H200) and c["num_stages"] >= 3
        with ts.backend("reference"):                                # a config the lookup takes
            assert configs.lookup("matmul", "?", c)["weight_major"]
    assert GM.weight_major_choice(cm.Gemm(72, 6144, 2560, "bf16"), cm.H200) is None
    assert GM.weight_major_choice(cm.Gemm(16, 6144, 2560, "bf16"), cm.H200) is None     # the linear family's


def test_a_non_bool_switch_is_refused(backend, device):
    x, w = randn((4, 64), "f32", 50, device), randn((40, 64), "f32", 51, device)
    with pytest.raises(ts.LaunchError, match=r"config weight_major=1 is not True or False"):
        tk.linear(x, w, config={"weight_major": 1})


@pytest.mark.gpu
@pytest.mark.parametrize("m", [2, 8, 32, 128])
def test_decode_weight_on_the_gpu(m):
    """A Qwen3-4B qkv weight (6144 x 2560, bf16) at decode batch sizes, on the H200: the
    automatic split and the row padding, against torch's product."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator(device="cuda").manual_seed(52)
    x = torch.randn(m, 2560, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(6144, 2560, device="cuda", dtype=torch.bfloat16, generator=g) / 50
    out = torch.full((m, 6144), float("nan"), device="cuda", dtype=torch.bfloat16)
    with ts.backend("triton"):
        got = tk.linear(x, w, out=out, config={"weight_major": True, "block_n": 64, "block_k": 128, "num_warps": 4})
        torch.cuda.synchronize()
    want = x.float() @ w.float().T
    assert got is out
    assert torch.allclose(out.float(), want, rtol=2e-2, atol=2e-2)


# --- compiled for Hopper (sm_90) on any machine: tensor-core wgmma, within an H200 block's shared memory ---
H200_SHARED = 232448


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="Triton's own library is interpreted")
@pytest.mark.parametrize("m, split", [(8, 1), (32, 3), (128, 2)])
def test_compiles_for_hopper_with_wgmma(monkeypatch, m, split):
    from compile_launches import compile_launches
    from tilesafe.runtime.compile_ahead import compile_ahead
    compiled = compile_launches(monkeypatch, ["weight_major"], lambda kernel, specs, schedule: compile_ahead(
        kernel, **specs, arch=90, descriptors=None, schedule=schedule))
    x, w = torch.empty(m, 2560, dtype=torch.bfloat16), torch.empty(6144, 2560, dtype=torch.bfloat16)
    tk.linear(x, w, config={"weight_major": True, "split_k": split, "block_n": 64, "block_k": 128,
                            "num_warps": 4, "num_stages": 4})
    (name, k), = compiled
    assert name == ("weight_major_kernel" if split == 1 else "weight_major_split_kernel")
    assert k.metadata.shared <= H200_SHARED, k.metadata.shared
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx
    split_form = name.endswith("_split_kernel")     # S16's ticket, and PDL as the other split kernels
    assert ("atom.global.gpu.acq_rel" in ptx) == split_form
    assert ("griddepcontrol.wait" in ptx) == split_form
