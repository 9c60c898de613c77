"""The weight-major product of a few rows (kernels/weight_major.py): `linear` with config
`weight_major` computes each output tile transposed (the weight as the MMA's wide operand),
over all of K or in K splits added up by the last split to finish."""
import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn

WM = importlib.import_module("tilesafe.kernels.weight_major")
GM = importlib.import_module("tilesafe.kernels.gemm_model")
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h200"
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


@pytest.mark.parametrize("m", [4, 20])      # the skinny path's config, and matmul's own (m > 16)
def test_matmul_takes_it_too_through_strides(backend, device, monkeypatch, m):
    """matmul(a, b) with b a transposed view (K, N) of a row-major weight: read in place."""
    a, w = randn((m, 64), "f32", 46, device), randn((48, 64), "f32", 47, device)
    names = launches(monkeypatch)
    got = tk.matmul(a, w.T, out=poisoned((m, 48), "f32", device), config={"weight_major": True})
    assert names == ["weight_major_kernel"]
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


def _early_round() -> dict:
    """{(model, weight, M, impl): us} of the H200 run (skinny_probe.py, session 20's early round:
    wm64 split as the rule did then, two blocks an SM rounded up; wm64s1 unsplit)."""
    doc = json.loads((RESULTS / "probe-skinny-s20-early.json").read_text())
    return {(r["model"], r["weight"], r["m"], r["impl"]): r["us"] for r in doc["rows"] if "us" in r}


DECODE = {("4B", "qkv"): (6144, 2560), ("4B", "o"): (2560, 4096), ("4B", "gate_up"): (19456, 2560),
          ("4B", "down"): (2560, 9728), ("8B", "qkv"): (6144, 4096), ("8B", "o"): (4096, 4096),
          ("8B", "gate_up"): (24576, 4096), ("8B", "down"): (4096, 12288)}


def test_the_rule_takes_it_where_it_measured_faster():
    """At M = 32 the model picks the weight-major kernel on exactly the decode weights where a
    timed weight-major config beat `linear`'s default of then (the row-major streaming rule), and
    that config is the one it picks (unsplit; the 8B down projection split, as the timed split
    configs, 5 slices then, 4 now: both faster); elsewhere `linear`'s default was at least as fast."""
    from tilesafe.kernels import config_model as cm
    us = _early_round()
    picked = set()
    for (model, weight), (n, k) in DECODE.items():
        c = cm.choose(cm.Gemm(32, n, k, "bf16"), cm.H200)
        linear = us[model, weight, 32, "linear"]
        if c.get("weight_major"):
            picked.add((model, weight))
            timed = us[model, weight, 32, "wm64s1" if c["split_k"] == 1 else "wm64"]
            assert timed < linear, (model, weight, timed, linear)
            assert (c["block_m"], c["block_n"], c["block_k"], c["num_warps"], c["num_stages"]) == (32, 64, 128, 4, 4)
        else:
            best = min(us[model, weight, 32, i] for i in ("wm64", "wm128", "wm64s1", "wm64k64"))
            assert linear <= best, (model, weight, linear, best)
    assert picked == {("4B", "qkv"), ("8B", "qkv"), ("8B", "o"), ("8B", "down")}
    assert cm.choose(cm.Gemm(32, 4096, 12288, "bf16"), cm.H200)["split_k"] == 4


@pytest.mark.parametrize("m", [2, 16, 64, 128])
def test_the_rule_leaves_other_rows_to_linears_kernels(m):
    """At 2..16 and 33..128 rows the weight-major configs lost on most weights (the qkv
    projections at M = 2..16 and 64 ran 1.00-1.03x `linear`'s default, the 4B o projection at
    M = 16 1.12x; every other weight slower): the model keeps the row-major kernels there."""
    from tilesafe.kernels import config_model as cm
    for n, k in DECODE.values():
        assert not cm.choose(cm.Gemm(m, n, k, "bf16"), cm.H200).get("weight_major")


def test_a_rule_config_is_one_the_lookup_takes():
    from tilesafe.kernels import config_model as cm
    from tilesafe.kernels import configs
    for m in (17, 24, 32):
        c = GM.weight_major_choice(cm.Gemm(m, 4096, 12288, "bf16"), cm.H200)
        assert c["weight_major"] and c["one_kernel"] and cm.valid(cm.Gemm(m, 4096, 12288, "bf16"), c, cm.H200)
        with ts.backend("reference"):
            assert configs.lookup("matmul", "?", c)["weight_major"]
    assert GM.weight_major_choice(cm.Gemm(32, 10240, 4096, "bf16"), cm.H200) is None    # 160 tiles: a wave
    assert GM.weight_major_choice(cm.Gemm(32, 2560, 4096, "bf16"), cm.H200) is None     # 40: the one-wave split
    assert GM.weight_major_choice(cm.Gemm(32, 4096, 1024, "bf16"), cm.H200) is None     # K shorter than timed


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
