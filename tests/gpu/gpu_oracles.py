"""Inputs and torch oracles shared by the GPU tests of library calls (call plans, call hits)."""
import torch


def rand_cuda(*shape, seed=0, dtype=torch.bfloat16):
    """Seeded normal values * 0.5 (drawn on the CPU, so the same on any GPU), on the GPU in `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 0.5).to(device="cuda", dtype=dtype)


def rms_norm_ref(x, w, eps=1e-6):
    """RMSNorm in float32, returned in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
