"""RMSNorm (with and without the fused residual add) and LayerNorm against torch in float64:
a hidden size that is not a power of two (2560) on the one-tile and the long-row paths,
per-head norms on a strided slice, torch and tilesafe tensors."""
import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn

ONE_TILE = {"row_max": 4096}          # 2560 -> one (1, 4096) tile per row
LONG = {"row_max": 512, "sub": 512}   # 2560 -> (1, 512) pieces


def rms_ref(x, w, eps):
    x, w = torch.as_tensor(f64(x)), torch.as_tensor(f64(w))
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def ln_ref(x, w, b, eps):
    x = torch.as_tensor(f64(x))
    return torch.nn.functional.layer_norm(x, x.shape[-1:], torch.as_tensor(f64(w)),
                                          None if b is None else torch.as_tensor(f64(b)), eps)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("config", [ONE_TILE, LONG], ids=["one_tile", "long"])
def test_rms_norm_hidden_2560(backend, device, config, dtype):
    x = randn((3, 2560), dtype, 1, device)
    w = randn((2560,), dtype, 2, device)
    out = poisoned((3, 2560), dtype, device)
    got = tk.rms_norm(x, w, 1e-6, out=out, config=config)
    assert got is out
    assert_close(got, rms_ref(x, w, 1e-6), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("config", [None, {"row_max": 256, "sub": 128}], ids=["default", "long"])
def test_rms_norm_fused_residual(backend, device, config, dtype):
    x, r = randn((2, 3, 700), dtype, 3, device), randn((2, 3, 700), dtype, 4, device)
    w = randn((700,), "f32", 5, device)                         # fp32 weight, half activations
    y_out, h_out = poisoned((2, 3, 700), dtype, device), poisoned((2, 3, 700), dtype, device)
    y, h = tk.rms_norm(x, w, 1e-5, residual=r, out=y_out, residual_out=h_out, config=config)
    assert y is y_out and h is h_out
    h_want = (x.double() + r.double()).to(x.dtype)             # rounded like `x + r` in torch
    assert_close(h, h_want, dtype, rtol=0, atol=0)
    assert_close(y, rms_ref(h_want, w, 1e-5), dtype)


def test_per_head_rms_norm_on_a_strided_slice(backend, device):
    qkv = randn((5, 3 * 4 * 64), "f32", 6, device)              # (tokens, (q heads + k + v) * D)
    q = qkv[:, :4 * 64].reshape(5, 4, 64)                       # (tokens, heads, D), row stride 768
    w = randn((64,), "f32", 7, device)
    assert_close(tk.rms_norm(q, w), rms_ref(q, w, 1e-6), "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("config", [None, LONG], ids=["default", "long"])
def test_layer_norm(backend, device, config, bias, dtype):
    x = randn((4, 1000), dtype, 8, device, scale=2.0) + 1.5    # a mean far from 0
    w, b = randn((1000,), dtype, 9, device), randn((1000,), dtype, 10, device)
    got = tk.layer_norm(x, w, b if bias else None, eps=1e-5, out=poisoned((4, 1000), dtype, device), config=config)
    assert_close(got, ln_ref(x, w, b if bias else None, 1e-5), dtype)


def test_tilesafe_tensors(backend, device):
    x = ts.tensor(np.linspace(-3, 3, 2 * 96, dtype=np.float32).reshape(2, 96), device=device)
    w = ts.tensor(np.linspace(0.5, 1.5, 96, dtype=np.float32), device=device)
    got = tk.rms_norm(x, w, 1e-6)
    assert isinstance(got, ts.Tensor)
    xn = x.numpy()
    want = xn / np.sqrt((xn * xn).mean(-1, keepdims=True) + 1e-6) * w.numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.reference_only
def test_errors(backend, device):
    x = randn((4, 8), "f32", 11, device)
    with pytest.raises(ts.LaunchError, match=r"`w` must have shape \(N,\)"):
        tk.rms_norm(x, randn((7,), "f32", 12, device))
    with pytest.raises(ts.LaunchError, match="`residual` has shape"):
        tk.rms_norm(x, x[0], residual=x[:2])
    with pytest.raises(ts.LaunchError, match="`b` has shape"):
        tk.layer_norm(x, x[0], x[0, :4])


@pytest.mark.parametrize("config", [None, {"row_max": 256, "sub": 128}], ids=["default", "long"])
def test_fused_residual_in_place(backend, device, config):
    x, res = randn((3, 700), "f32", 13, device), randn((3, 700), "f32", 14, device)
    w = randn((700,), "f32", 15, device)
    h_want = torch.as_tensor(f64(x)) + torch.as_tensor(f64(res))
    y, h = tk.rms_norm(x, w, 1e-6, residual=res, residual_out=res, config=config)   # res += x
    assert h is res
    assert_close(res, h_want, "f32")
    assert_close(y, rms_ref(h_want, w, 1e-6), "f32")
