"""Random inputs, poisoned outputs and per-dtype tolerances for the kernel-library tests.

Oracles live in the tests (torch in float64 on the same rounded inputs); nothing here
imports tilesafe internals.
"""
import numpy as np
import torch

import tilesafe as ts

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# (rtol, atol): fp32 as DESIGN §2 states it; half types allow the output's own rounding.
TOL = {"f32": (2e-5, 2e-5), "f16": (1e-2, 1e-2), "bf16": (2e-2, 2e-2)}


def randn(shape, dtype: str, seed: int, device="cpu", scale: float = 1.0) -> torch.Tensor:
    """Seeded normal values in `dtype` (never all zeros or ones)."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(DTYPES[dtype]).to(device)


def poisoned(shape, dtype, device="cpu") -> torch.Tensor:
    """An output buffer full of NaN (or -12345 for ints): any element not written shows."""
    dt = DTYPES.get(dtype, dtype)
    value = float("nan") if dt.is_floating_point else -12345
    return torch.full(shape, value, dtype=dt, device=device)


def f64(t) -> np.ndarray:
    if isinstance(t, ts.Tensor):
        t = torch.from_numpy(np.asarray(t.numpy(), dtype=np.float64))
    return t.detach().to("cpu", torch.float64).numpy()


def assert_close(got, want, dtype: str, rtol=None, atol=None) -> None:
    r, a = TOL[dtype]
    got, want = f64(got), f64(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=r if rtol is None else rtol, atol=a if atol is None else atol)
