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
    kinds = {(c["block_m"], c["block_n"], c["split_k"] > 1, c["tail_split"]) for c in got[:5]}
    assert len(kinds) == 5, got                       # the rule's kind and four others


def test_a_short_k_gemv_is_the_rules_4_kb_loads_of_the_least_padded_k_tile():
    """One row by a short K with many columns (session 19, H200: 16384 x 1024 and 10240 x 1536 ran
    8 x 256 tiles best, 1.017 and 1.077 of F.linear): the rule picks 4 KB loads, 256-wide K tiles
    unless 128 pads K less (K = 1600: 16 x 128), ahead of the model's ranking, which the
    autotune still times beside it."""
    g = cm.H200
    shape = cm.Gemm(1, 16384, 1024, "bf16")
    rule = gm.short_k_gemv(shape, g)
    assert (rule["block_n"], rule["block_k"], rule["split_k"], rule["num_stages"]) == (8, 256, 1, 4)
    assert cm.choose(shape, g) == rule
    got = cm.ranked(shape, 4, g)
    assert len(got) == 5 and got[0] == rule and rule not in got[1:]
    assert cm.valid(shape, rule, g)
    padded = gm.short_k_gemv(cm.Gemm(1, 12800, 1600, "bf16"), g)    # 1792 (256s) against 1664 (128s)
    assert (padded["block_n"], padded["block_k"]) == (16, 128)
    tie = gm.short_k_gemv(cm.Gemm(1, 16384, 1000, "bf16"), g)        # both pad to 1024: the wider K tile
    assert tie is None                                               # ... but K < 1024 was never measured
    assert (gm.short_k_gemv(cm.Gemm(1, 16384, 1920, "bf16"), g)["block_k"]) == 128     # 2048 against 1920
    assert (gm.short_k_gemv(cm.Gemm(1, 19456, 2048, "bf16"), g)["block_n"]) == 8
    assert gm.short_k_gemv(cm.Gemm(1, 4096, 1024, "bf16"), g) is None      # 512 blocks of 8: under 4 per SM
    assert gm.short_k_gemv(cm.Gemm(1, 16384, 2560, "bf16"), g) is None     # a long K: the model's
    assert gm.short_k_gemv(cm.Gemm(1, 16384, 896, "bf16"), g) is None      # K under 1024: unmeasured, the model's
    assert gm.short_k_gemv(cm.Gemm(2, 16384, 1024, "bf16"), g) is None     # tensor cores: not a GEMV
    assert len(cm.ranked(cm.Gemm(1, 16384, 4096, "bf16"), 4, g)) == 4


def test_the_short_k_gemv_rule_computes_the_product(backend, device):
    """The rule's config launches and computes x @ w.T on both CPU backends (a small weight of
    short K: 8 x 128 tiles in fp32, several K tiles, a ragged last K and column tile)."""
    rule = gm.short_k_gemv(cm.Gemm(1, 16384, 1024, "f32"), cm.H200)
    assert (rule["block_n"], rule["block_k"]) == (8, 128)           # fp32: 4 KB loads of half the K tile
    x, w = randn((1, 300), "f32", 1, device), randn((70, 300), "f32", 2, device)
    out = poisoned((1, 70), "f32", device)
    got = tk.linear(x, w, out=out, config=rule)
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


def test_few_output_tiles_get_thin_row_tiles_timed():
    """72..83 rows by a 3.5-4.6k weight: 64-row tiles leave most SMs idle and splits lost (session 19,
    H200); 32-row tiles add blocks in one wave (4608 x 3584 at M = 83: 108 against 72), with the
    deepest pipeline, unsplit. Only a timed candidate: the model's choice stays."""
    g = cm.H200
    shape = cm.Gemm(83, 4608, 3584, "bf16")
    c = gm.thin_rows(shape, g)
    assert (c["block_m"], c["block_n"], c["block_k"], c["split_k"], c["num_stages"]) == (32, 128, 64, 1, 8)
    assert 3 * 36 <= g.sms and cm.valid(shape, c, g)
    got = cm.ranked(shape, 4, g)
    assert got[-1] == c and cm.choose(shape, g) != c
    assert gm.thin_rows(cm.Gemm(125, 4608, 3584, "bf16"), g) is None      # 4 x 36 = 144 blocks: past one wave
    assert gm.thin_rows(cm.Gemm(83, 16384, 4096, "bf16"), g) is None      # 2 x 128 tiles of 64 rows: enough
    assert gm.thin_rows(cm.Gemm(48, 2560, 9728, "bf16"), g) is None       # <= 64 rows: one 64-row tile
    assert gm.thin_rows(cm.Gemm(1, 4096, 4096, "bf16"), g) is None        # the GEMV path


def test_thin_row_tiles_compute_the_product(backend, device):
    """Its config (f32: 32 x 128 x 32 tiles) computes a @ w.T on both CPU backends (three row tiles,
    the last one ragged, over several K tiles)."""
    c = gm.thin_rows(cm.Gemm(83, 4608, 3584, "f32"), cm.H200)
    assert (c["block_m"], c["block_k"]) == (32, 32)
    a, w = randn((70, 100), "f32", 1, device), randn((40, 100), "f32", 2, device)
    out = poisoned((70, 40), "f32", device)
    got = tk.linear(a, w, out=out, config=c)
    assert_close(got, torch.as_tensor(f64(a)) @ torch.as_tensor(f64(w)).T, "f32", rtol=1e-4, atol=1e-4)
