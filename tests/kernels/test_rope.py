"""RoPE, SwiGLU's silu_mul, embedding and argmax against oracles written here."""
import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn


def rope_ref(x, positions, theta):
    """Rotate-half RoPE in float64 (Llama / Qwen)."""
    x = torch.as_tensor(f64(x))
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)                # (D/2,)
    angle = torch.as_tensor(np.asarray(positions.cpu(), np.float64))[:, None] * inv_freq   # (T, D/2)
    cos, sin = torch.cat([angle.cos()] * 2, -1)[:, None], torch.cat([angle.sin()] * 2, -1)[:, None]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("d", [128, 40])
def test_rope(backend, device, d, dtype):
    x = randn((5, 3, d), dtype, 1, device)                        # (tokens, heads, head_dim)
    positions = torch.tensor([0, 1, 17, 250, 999], device=device)
    out = poisoned((5, 3, d), dtype, device)
    got = tk.rope(x, positions, out=out)
    assert got is out
    # fp32 angles of positions up to ~1000 carry ~1e-4 rad of rounding.
    assert_close(got, rope_ref(x, positions, 1e6), dtype, atol=3e-4 if dtype == "f32" else None)


def test_rope_theta_and_int32_positions_on_a_strided_view(backend, device):
    qkv = randn((4, 6, 64), "f32", 2, device)                     # q and k heads packed
    k = qkv[:, 4:]                                                # (tokens, 2 heads, 64), strided
    positions = torch.tensor([3, 2, 1, 0], dtype=torch.int32, device=device)
    assert_close(tk.rope(k, positions, theta=10000.0), rope_ref(k, positions, 10000.0), "f32", atol=1e-5)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_silu_mul(backend, device, dtype):
    g, u = randn((7, 300), dtype, 3, device, scale=3.0), randn((7, 300), dtype, 4, device)
    want = torch.nn.functional.silu(torch.as_tensor(f64(g))) * torch.as_tensor(f64(u))
    assert_close(tk.silu_mul(g, u, out=poisoned((7, 300), dtype, device)), want, dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_embedding(backend, device, dtype):
    table = randn((50, 70), dtype, 5, device)
    ids = torch.tensor([[3, 49, 0, 7], [7, 7, 12, 1], [2, 48, 30, 5]], device=device)
    out = poisoned((3, 4, 70), dtype, device)
    got = tk.embedding(ids, table, out=out)
    assert got is out
    assert torch.equal(got.cpu(), table.cpu()[ids.cpu()])                 # a copy: bit-exact


def test_embedding_int32_ids_tilesafe_tensors(backend, device):
    table = ts.tensor(np.arange(40 * 8, dtype=np.float32).reshape(40, 8), device=device)
    ids = ts.tensor(np.array([39, 0, 5], np.int32), device=device)
    got = tk.embedding(ids, table)
    assert isinstance(got, ts.Tensor)
    np.testing.assert_array_equal(got.numpy(), table.numpy()[[39, 0, 5]])


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("config", [None, {"block_n": 16, "chunk": 32}], ids=["default", "many_chunks"])
def test_argmax(backend, device, config, dtype):
    x = randn((4, 500), dtype, 6, device)
    x[1, 123] = 50.0
    x[2, 7] = x[2, 400] = 50.0                                    # a tie: the first index wins
    x[3] = float("-inf")
    x[3, 499] = -1e4
    out = poisoned((4,), torch.int32, device)
    got = tk.argmax(x, out=out, config=config)
    assert got is out and got.dtype == torch.int32
    assert got.tolist() == torch.argmax(x.float().cpu(), -1).tolist() == [got[0].item(), 123, 7, 499]


def test_argmax_workspace_and_shapes(backend, device):
    x = randn((2, 3, 1000), "f32", 7, device)
    ws = tk.argmax_workspace(x)
    got = tk.argmax(x, workspace=ws)
    assert got.shape == (2, 3)
    assert torch.equal(got.long().cpu(), x.argmax(-1).cpu())
    v = randn((1000,), "f32", 8, device)
    assert tk.argmax(v).item() == v.argmax().item()


@pytest.mark.reference_only
def test_errors(backend, device):
    x = randn((4, 3, 8), "f32", 9, device)
    with pytest.raises(ts.LaunchError, match="positions"):
        tk.rope(x, torch.arange(3, device=device))
    with pytest.raises(ts.LaunchError, match="even head_dim"):
        tk.rope(x[..., :7], torch.arange(4, device=device))
    with pytest.raises(ts.LaunchError, match="`ids` has dtype f32"):
        tk.embedding(x[0, 0], x[0])
    with pytest.raises(ts.LaunchError, match="non-empty last axis"):
        tk.argmax(x[..., :0])
