"""What the first-use autotune times (`config_model.ranked`): distinct configs only, and the
rule candidates the model alone would rank too low (issue 22: the random-shape benchmark's
misses were configs the autotune never tried)."""
import pytest
import torch

import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn
from tilesafe.kernels import config_model as cm
from tilesafe.kernels import configs
from tilesafe.kernels import gemm_model as gm


def _whole(family: str, c: dict) -> dict:
    """A config as the lookup completes it (the family's defaults around it)."""
    return dict(configs.GPU_DEFAULTS[family], **c)


@pytest.mark.parametrize("m,n,k", [(125, 6144, 4096), (100, 6144, 2560), (83, 6144, 4096), (125, 4096, 4096)])
def test_the_autotune_never_times_one_config_twice(m, n, k):
    """The streaming rule's pick carries `one_kernel` and the ranking's copy of it did not, so the
    two compared unequal and the autotune timed one config twice in place of another kind
    (Qwen3 8B qkv at M = 125: the rule's 64 x 128 x 64 unsplit, then the same again)."""
    shape = cm.Gemm(m, n, k, "bf16")
    got = [_whole("matmul", c) for c in cm.ranked(shape, 4, cm.H200)]
    assert gm.streaming_choice(shape, cm.H200) is not None and len(got) >= 5
    assert all(got[i] != got[j] for i in range(len(got)) for j in range(i)), got
    kinds = {(c["block_m"], c["block_n"], c["split_k"] > 1, c["tail_split"], bool(c.get("weight_major")))
             for c in got[:5]}
    assert len(kinds) == 5, got                       # the rule's kind and four others


def test_a_short_k_gemv_gets_the_short_k_forms_timed_beside_the_models_choice():
    """One row by a short K with many columns: 16 x 128, 8 x 256 (4 stages) and 16 x 256 (3 stages)
    each ran best on some synthetic weight on the H200 (session 19) but none beat the model's own
    ranking over all of them, so the model keeps the choice and the autotune times the three beside
    its four kinds (where a form is not among them already)."""
    g = cm.H200
    shape = cm.Gemm(1, 16384, 1024, "bf16")
    forms = gm.short_k_gemvs(shape, g)
    assert [(c["block_n"], c["block_k"], c["split_k"], c["num_stages"]) for c in forms] == \
        [(16, 128, 1, 4), (8, 256, 1, 4), (16, 256, 1, 3)]
    assert all(cm.valid(shape, c, g) for c in forms)
    got, model = cm.ranked(shape, 4, g), cm.choose(shape, g)
    assert got[0] == model and model not in forms and model == cm.candidates(shape, g)[0]
    assert all(any(cm._same(f, c) for c in got) for f in forms) and 5 <= len(got) <= 7
    assert all(got[i] != got[j] for i in range(len(got)) for j in range(i))
    fp32 = gm.short_k_gemvs(cm.Gemm(1, 16384, 1024, "f32"), g)             # the same bytes: half the K tile
    assert [(c["block_n"], c["block_k"]) for c in fp32] == [(16, 64), (8, 128), (16, 128)]
    assert [c["block_n"] for c in gm.short_k_gemvs(cm.Gemm(1, 6144, 1024, "bf16"), g)] == [8]   # 384 of 16: few
    assert gm.short_k_gemvs(cm.Gemm(1, 4096, 1024, "bf16"), g) == []      # 512 blocks of 8: under 4 per SM
    assert gm.short_k_gemvs(cm.Gemm(1, 16384, 2560, "bf16"), g) == []     # a long K: the model's alone
    assert gm.short_k_gemvs(cm.Gemm(1, 16384, 896, "bf16"), g) == []      # K under 1024: unmeasured
    assert gm.short_k_gemvs(cm.Gemm(2, 16384, 1024, "bf16"), g) == []     # tensor cores: not a GEMV
    assert len(cm.ranked(cm.Gemm(1, 16384, 4096, "bf16"), 4, g)) == 4


@pytest.mark.parametrize("form", range(3))
def test_the_short_k_gemv_forms_compute_the_product(backend, device, form):
    """Each form launches and computes x @ w.T on both CPU backends (a small weight of short K in
    fp32: several K tiles, a ragged last K and column tile)."""
    cfg = gm.short_k_gemvs(cm.Gemm(1, 16384, 1024, "f32"), cm.H200)[form]
    x, w = randn((1, 300), "f32", 1, device), randn((70, 300), "f32", 2, device)
    out = poisoned((1, 70), "f32", device)
    got = tk.linear(x, w, out=out, config=cfg)
    assert_close(got, torch.as_tensor(f64(x)) @ torch.as_tensor(f64(w)).T, "f32", rtol=1e-4, atol=1e-4)


def test_few_output_tiles_get_the_balanced_split_timed():
    """Fewer output tiles than ~0.8 of the SMs (Qwen3 8B qkv at M = 125: 96 tiles of 64 x 128;
    8B o at M = 100: 64) leave SMs idle: the autotune also times K split so that the busiest
    SM's K steps are fewest, with a pipeline shallow enough for its blocks to share the SM,
    added up in one launch. It is only a timed candidate: the model's choice stays."""
    g = cm.H200
    shape = cm.Gemm(125, 6144, 4096, "bf16")          # 2 x 48 = 96 tiles, 64 K tiles
    c = gm.balanced_split(shape, g)
    # splits 2..8: the busiest SM holds ceil(96 s / 132) blocks of ceil(64 / s) + 3 steps;
    # four slices (3 blocks x 19) beat two (2 x 35), three (3 x 25) and unsplit (1 x 67)
    assert (c["block_m"], c["block_n"], c["block_k"], c["split_k"], c["one_kernel"]) == (64, 128, 64, 4, True)
    assert c["num_stages"] == 3 and gm.blocks_per_sm(64, 128, 64, 3, 4, 2, g) >= 3
    assert cm.valid(shape, c, g) and cm.ranked(shape, 4, g)[-1] == c
    assert cm.choose(shape, g) != c and cm.choose(shape, g) == gm.streaming_choice(shape, g)
    one = gm.balanced_split(cm.Gemm(100, 4096, 4096, "bf16"), g)   # 64 tiles: two slices, one block per SM
    assert (one["split_k"], one["num_stages"]) == (2, 8)
    assert gm.balanced_split(cm.Gemm(400, 4096, 4096, "bf16"), g) is None     # 224 tiles: enough
    assert gm.balanced_split(cm.Gemm(24, 2560, 9728, "bf16"), g) is None      # <= 32 rows: the rule splits
    assert gm.balanced_split(cm.Gemm(100, 4096, 256, "bf16"), g) is None      # 4 K tiles: nothing to split
    assert gm.balanced_split(cm.Gemm(1, 4096, 4096, "bf16"), g) is None       # the GEMV path


@pytest.mark.parametrize("m,n,k", [(40, 48, 600), (70, 100, 1000)])
def test_the_balanced_split_computes_the_product(backend, device, m, n, k):
    """Its config (f32: 64 x 128 x 32 tiles, shrunk to the sizes; K in slices added up by the
    last slice of each tile) computes a @ w.T on both CPU backends."""
    c = gm.balanced_split(cm.Gemm(125, 6144, 4096, "f32"), cm.H200)
    assert c["split_k"] > 1 and c["one_kernel"] and c["block_k"] == 32
    a, w = randn((m, k), "f32", 1, device), randn((n, k), "f32", 2, device)
    out = poisoned((m, n), "f32", device)
    got = tk.linear(a, w, out=out, config=c)
    assert_close(got, torch.as_tensor(f64(a)) @ torch.as_tensor(f64(w)).T, "f32", rtol=1e-4, atol=1e-4)
