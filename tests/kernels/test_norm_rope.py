"""norm_rope (per-head RMSNorm then RoPE, one kernel) against a float64 oracle written here,
and against the two library calls it replaces (which round the norm the same way)."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_at_call
from kernel_helpers import assert_close, f64, poisoned, randn


def norm_rope_ref(x, w, positions, eps, theta):
    """RMSNorm over head_dim (float64), then rotate-half RoPE (Qwen3's q/k path)."""
    x, w = torch.as_tensor(f64(x)), torch.as_tensor(f64(w))
    d = x.shape[-1]
    x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)                 # (D/2,)
    angle = positions.cpu().double()[:, None] * inv_freq                                 # (T, D/2)
    cos, sin = torch.cat([angle.cos()] * 2, -1)[:, None], torch.cat([angle.sin()] * 2, -1)[:, None]
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("d", [128, 40])
def test_norm_rope(backend, device, d, dtype):
    qkv = randn((5, 7, d), dtype, 1, device, scale=3.0)
    x = qkv[:, 2:5]                                               # (tokens, 3 heads, d): strided, as q in qkv
    w = randn((d,), dtype, 2, device)
    positions = torch.tensor([0, 1, 17, 250, 999], dtype=torch.int32, device=device)
    out = poisoned((5, 3, d), dtype, device)
    got = tk.norm_rope(x, w, positions, eps=1e-6, theta=1e6, out=out)
    assert got is out
    # fp32 angles of positions up to ~1000 carry ~1e-4 rad of rounding.
    assert_close(got, norm_rope_ref(x, w, positions, 1e-6, 1e6), dtype, atol=3e-4 if dtype == "f32" else None)
    two = tk.rope(tk.rms_norm(x, w, 1e-6), positions, theta=1e6)
    assert_close(got, two, dtype, atol=1e-5 if dtype == "f32" else None)   # what it replaces


def test_norm_rope_bad_input(backend, device):
    x = randn((2, 3, 8), "f32", 3, device)
    pos = torch.tensor([0, 1], device=device)
    with pytest.raises(ts.LaunchError) as e:
        tk.norm_rope(x, torch.ones(4, device=device), pos)  # weight
    assert_at_call(e.value, __file__, "weight", "weight (head_dim,)", "got x (2, 3, 8), weight (4,)")
    with pytest.raises(ts.LaunchError) as e:
        tk.norm_rope(x, torch.ones(8, device=device), pos, theta=1.0)  # theta
    assert_at_call(e.value, __file__, "theta", "theta must be > 1")


def test_theta_is_refused_with_empty_x_too(backend, device):
    x, pos = randn((0, 3, 8), "f32", 3, device), torch.zeros(0, dtype=torch.int32, device=device)
    with pytest.raises(ts.LaunchError) as e:
        tk.norm_rope(x, torch.ones(8, device=device), pos, theta=1.0)  # empty norm_rope theta
    assert_at_call(e.value, __file__, "empty norm_rope theta", "theta must be > 1, got 1.0")
    with pytest.raises(ts.LaunchError) as e:
        tk.rope(x, pos, theta=0.5)  # empty rope theta
    assert_at_call(e.value, __file__, "empty rope theta", "theta must be > 1, got 0.5")
