"""The one-launch split-K (config `one_kernel`: the last split of each output tile adds the
splits up, S16) on the GPU, where blocks really race for their tickets: many output tiles,
split counts that do not divide K's tiles, ragged M, N and K. Each call against torch in
float64, the two-kernel form, and itself called again (the sum is in split order whichever
block is last, and the tickets are back at zero after every launch: bit for bit the same)."""
import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.kernels import config_model as cm
from tilesafe.kernels import gemm_model as gm

pytestmark = pytest.mark.gpu
F = torch.nn.functional
BF = torch.bfloat16
N, K = 3000, 4000          # ragged against every column and K tile


def rand(*shape, scale=1.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, device="cuda")).to(BF)


def close(got, want, rel=1e-2):
    err = (got.double() - want.double()).abs().max().item()
    assert err <= rel * want.double().abs().max().item(), err


# m = 1: FMAs; 8: tensor cores (linear's M <= 16 path); 100, 128: the GEMM path's split-K
@pytest.mark.parametrize("m, cfg", [
    (1, {"split_k": 5}), (8, {"split_k": 5}),
    (100, {"split_k": 7, "block_m": 64, "block_n": 64, "block_k": 64}),
    (128, {"split_k": 3, "block_m": 128, "block_n": 128, "block_k": 64}),
])
def test_one_kernel_split_k_matches_torch_and_the_two_kernel_form(m, cfg):
    check(m, N, K, cfg)


def test_the_few_tiles_rule_at_the_4b_down_projection():
    """gemm_model.streaming_choice at M = 24 of a 2560 x 9728 weight (40 tiles of 32 x 64: K
    in three slices added up by the last one of each tile when this was written): the rule's
    own tiles, stages and split, in one launch and in two."""
    cfg = gm.streaming_choice(cm.Gemm(24, 2560, 9728, "bf16"), cm.H200)
    assert cfg is not None and cfg["split_k"] > 1
    check(24, 2560, 9728, {key: value for key, value in cfg.items() if key != "one_kernel"})


def check(m, n, k, cfg):
    x, w, bias = rand(m, k, seed=1), rand(n, k, scale=0.02, seed=2), rand(n, scale=0.1, seed=3)
    want = F.silu(F.linear(x.double(), w.double(), bias.double()))
    one = dict(cfg, one_kernel=True)
    got = tk.linear(x, w, bias=bias, activation="silu", out=torch.full((m, n), float("nan"), device="cuda",
                                                                      dtype=BF), config=one)
    close(got, want)
    close(got, tk.linear(x, w, bias=bias, activation="silu", config=dict(cfg, one_kernel=False)), rel=5e-3)
    for _ in range(5):
        again = tk.linear(x, w, bias=bias, activation="silu", out=torch.full_like(got, float("nan")), config=one)
        assert torch.equal(again, got)
