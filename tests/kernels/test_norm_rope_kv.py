"""norm_rope_kv_write (q/k per-head norm + RoPE and the paged K/V cache write in one kernel)
against a float64 oracle written here: q, the rows written at their slots, the rows left."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_at_call
from kernel_helpers import assert_close, f64, poisoned, randn
from test_norm_rope import norm_rope_ref


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("d", [128, 40])
def test_norm_rope_kv_write(backend, device, d, dtype):
    t, h, hkv, nb, bs = 3, 4, 2, 3, 8
    qkv = randn((t, h + 2 * hkv, d), dtype, 1, device, scale=3.0)          # a packed qkv row per token
    q, k, v = qkv[:, :h], qkv[:, h:h + hkv], qkv[:, h + hkv:]
    wq, wk = randn((d,), dtype, 2, device), randn((d,), dtype, 3, device)
    positions = torch.tensor([5, 0, 17], dtype=torch.int32, device=device)
    slots = torch.tensor([13, 0, 23], dtype=torch.int32, device=device)   # block 1 row 5, block 0 row 0, block 2 row 7
    old_k, old_v = randn((nb, bs, hkv, d), dtype, 4, device), randn((nb, bs, hkv, d), dtype, 5, device)
    kc, vc = old_k.clone(), old_v.clone()
    out = poisoned((t, h, d), dtype, device)
    got = tk.norm_rope_kv_write(q, k, v, wq, wk, positions, slots, kc, vc, eps=1e-6, theta=1e6, q_out=out)
    assert got is out
    tol = 3e-4 if dtype == "f32" else None
    assert_close(got, norm_rope_ref(q, wq, positions, 1e-6, 1e6), dtype, atol=tol)
    rows_k, rows_v = kc.reshape(nb * bs, hkv, d), vc.reshape(nb * bs, hkv, d)
    assert_close(rows_k[slots.long()], norm_rope_ref(k, wk, positions, 1e-6, 1e6), dtype, atol=tol)
    assert torch.equal(rows_v[slots.long()].cpu(), v.cpu())                # a copy: bit-exact
    rest = [r for r in range(nb * bs) if r not in slots.tolist()]
    assert torch.equal(rows_k[rest].cpu(), old_k.reshape(nb * bs, hkv, d)[rest].cpu())
    assert torch.equal(rows_v[rest].cpu(), old_v.reshape(nb * bs, hkv, d)[rest].cpu())


def test_a_negative_slot_writes_nothing(backend, device):
    qkv = randn((2, 4, 16), "f32", 6, device)
    kc, vc = torch.zeros(2, 4, 1, 16, device=device), torch.zeros(2, 4, 1, 16, device=device)
    w = torch.ones(16, device=device)
    slots = torch.tensor([-1, 6], dtype=torch.int32, device=device)
    q = tk.norm_rope_kv_write(qkv[:, :2], qkv[:, 2:3], qkv[:, 3:], w, w, torch.tensor([0, 1], device=device), slots,
                              kc, vc)
    assert q.shape == (2, 2, 16)
    assert kc.reshape(8, 16)[[0, 1, 2, 3, 4, 5, 7]].abs().sum() == 0 and vc.reshape(8, 16)[6].abs().sum() > 0
    assert torch.equal(vc.reshape(8, 16)[6].cpu(), qkv[1, 3].cpu())
    assert vc.reshape(8, 16)[[0, 1, 2, 3, 4, 5, 7]].abs().sum() == 0


def test_norm_rope_kv_write_bad_input(backend, device):
    qkv = randn((2, 4, 16), "f32", 7, device)
    kc, vc = torch.zeros(2, 4, 1, 16, device=device), torch.zeros(2, 4, 1, 16, device=device)
    w, pos = torch.ones(16, device=device), torch.tensor([0, 1], device=device)
    slots = torch.tensor([0, 1], device=device)
    with pytest.raises(ts.LaunchError) as e:
        tk.norm_rope_kv_write(qkv[:, :2], qkv[:, 2:4], qkv[:, 2:4], w, w, pos, slots, kc, vc)  # heads
    assert_at_call(e.value, __file__, "heads", "caches (num_blocks, block_size, HKV, D)", "k (2, 2, 16)")
    with pytest.raises(ts.LaunchError) as e:
        tk.norm_rope_kv_write(qkv[:, :2], qkv[:, 2:3], qkv[:, 3:], w[:8], w, pos, slots, kc, vc)  # weight
    assert_at_call(e.value, __file__, "weight", "q_weight and k_weight (16,)")
    with pytest.raises(ts.LaunchError) as e:
        tk.norm_rope_kv_write(qkv[:, :2], qkv[:, 2:3], qkv[:, 3:], w, w, pos, slots, kc, vc, theta=1.0)  # theta
    assert_at_call(e.value, __file__, "theta", "theta must be > 1, got 1.0")


@pytest.mark.parametrize("stagger", [True, False])
@pytest.mark.parametrize("d,t,kernel", [(64, 2, "norm_rope_kv_rows_kernel"), (40, 2, "norm_rope_kv_kernel"),
                                        (64, 1, "norm_rope_kv_rows_kernel")])
def test_whole_heads_per_tile_when_half_a_head_is_a_power_of_two(backend, device, monkeypatch, d, t, kernel, stagger):
    """Three walks (q, k, v) instead of five when the halves are powers of two (twice as fast
    on the H200), on blocks of their own or not (STAGGER_WALKS). GQA 8, a ragged head tile,
    tiles set by config=."""
    import importlib

    import tilesafe.kernels.launch as kernel_launch
    monkeypatch.setattr(importlib.import_module("tilesafe.kernels.norm_rope_kv"), "STAGGER_WALKS", stagger)
    seen, real = [], kernel_launch.start
    monkeypatch.setattr(kernel_launch, "start", lambda k, *a, **kw: (seen.append(k.name), real(k, *a, **kw)))
    h, hkv = 24, 3
    qkv = randn((t, h + 2 * hkv, d), "f32", 8, device, scale=2.0)
    q, k, v = qkv[:, :h], qkv[:, h:h + hkv], qkv[:, h + hkv:]
    wq, wk = randn((d,), "f32", 9, device), randn((d,), "f32", 10, device)
    positions = torch.tensor([1000, 3][:t], dtype=torch.int32, device=device)
    slots = torch.tensor([5, 2][:t], dtype=torch.int32, device=device)
    kc, vc = torch.zeros(2, 4, hkv, d, dtype=torch.float32, device=device), torch.zeros(2, 4, hkv, d,
                                                                                          dtype=torch.float32,
                                                                                          device=device)
    got = tk.norm_rope_kv_write(q, k, v, wq, wk, positions, slots, kc, vc, q_out=poisoned((t, h, d), "f32", device),
                                config={"block_t": 1, "block_h": 16})
    assert seen == [kernel]
    assert_close(got, norm_rope_ref(q, wq, positions, 1e-6, 1e6), "f32", atol=3e-4)
    assert_close(kc.reshape(8, hkv, d)[slots.long()], norm_rope_ref(k, wk, positions, 1e-6, 1e6), "f32", atol=3e-4)
    assert torch.equal(vc.reshape(8, hkv, d)[slots.long()].cpu(), v.cpu())


def test_small_steps_take_narrow_tiles():
    """One token by ONE_TOKEN_HEADS heads at one token, one by FEW_TOKEN_HEADS up to FEW_TOKENS
    (2 heads at 8 tokens: 4.28 against 5.94 us a layer on the H200), the "rope" config's tiles
    above; config= keys win, the token tile never exceeds the step."""
    from tilesafe.kernels.norm_rope_kv import FEW_TOKEN_HEADS, FEW_TOKENS, ONE_TOKEN_HEADS, step_tiles
    cfg = {"block_t": 4, "block_h": 8}
    assert step_tiles(1, cfg, {}) == (1, ONE_TOKEN_HEADS)
    assert step_tiles(2, cfg, {}) == step_tiles(FEW_TOKENS, cfg, {}) == (1, FEW_TOKEN_HEADS) == (1, 2)
    assert step_tiles(FEW_TOKENS + 1, cfg, {}) == step_tiles(128, cfg, {}) == (4, 8)
    assert step_tiles(3, cfg, {"block_t": 2, "block_h": 16}) == (2, 16)
    assert step_tiles(2, cfg, {"block_t": 4}) == (2, FEW_TOKEN_HEADS)
    assert step_tiles(32, cfg, {"block_h": 2}) == (4, 2)


def test_a_step_of_eight_tokens_matches_the_oracle(backend, device):
    """Eight tokens (the narrow tiles), GQA 4, every token to its own slot."""
    t, h, hkv, d = 8, 8, 2, 16
    qkv = randn((t, h + 2 * hkv, d), "f32", 11, device, scale=2.0)
    q, k, v = qkv[:, :h], qkv[:, h:h + hkv], qkv[:, h + hkv:]
    wq, wk = randn((d,), "f32", 12, device), randn((d,), "f32", 13, device)
    positions = torch.arange(3, 3 + t, dtype=torch.int32, device=device)
    slots = torch.tensor([9, 0, 4, 15, 2, 7, 12, 5], dtype=torch.int32, device=device)
    kc, vc = torch.zeros(2, 8, hkv, d, device=device), torch.zeros(2, 8, hkv, d, device=device)
    got = tk.norm_rope_kv_write(q, k, v, wq, wk, positions, slots, kc, vc, q_out=poisoned((t, h, d), "f32", device))
    assert_close(got, norm_rope_ref(q, wq, positions, 1e-6, 1e6), "f32", atol=3e-4)
    assert_close(kc.reshape(16, hkv, d)[slots.long()], norm_rope_ref(k, wk, positions, 1e-6, 1e6), "f32", atol=3e-4)
    assert torch.equal(vc.reshape(16, hkv, d)[slots.long()].cpu(), v.cpu())
