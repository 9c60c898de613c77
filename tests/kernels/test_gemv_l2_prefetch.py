"""The decode GEMVs' L2 prefetch before the PDL wait (matmul.GEMV_L2_PREFETCH for weights of at
most GEMV_L2_PREFETCH_BYTES, `ts.prefetch`).

With it set, one-row `linear`, `silu_mul_linear` and `linear_argmax` compute what NumPy
does on both CPU backends (the prefetch changes no value) and launch with L2P = the setting;
compiled for Hopper under PDL, their GEMV issues `prefetch.global.L2` before
`griddepcontrol.wait` and every weight load after it, and with the setting at 0 no prefetch."""
import importlib
import os

import numpy as np
import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.bench.observe import Observer
from tilesafe.kernels import call_plans
from tilesafe.runtime.compile_ahead import compile_ahead

import tilesafe as ts
from compile_launches import compile_launches

MM = importlib.import_module("tilesafe.kernels.matmul")
LF = importlib.import_module("tilesafe.kernels.linear_fusions")
LA = importlib.import_module("tilesafe.kernels.linear_argmax")


@pytest.fixture
def prefetching(monkeypatch):
    monkeypatch.setattr(MM, "GEMV_L2_PREFETCH", 2)
    monkeypatch.setattr(call_plans, "call_key", lambda *a: (None, None))   # every call takes its full path


def test_prefetching_gemvs_compute_what_numpy_does(backend, device, prefetching):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 96)).astype(np.float32), rng.standard_normal((40, 96)).astype(np.float32)
    res = rng.standard_normal((1, 40)).astype(np.float32)
    gu = rng.standard_normal((1, 192)).astype(np.float32)
    with Observer([MM.skinny_kernel, LF.fused_skinny_kernel]) as seen:
        y = tk.linear(torch.from_numpy(x).to(device), torch.from_numpy(w).to(device),
                      config={"block_n": 16, "block_k": 32})
    np.testing.assert_allclose(y.cpu().numpy(), x @ w.T, rtol=1e-5, atol=1e-5)
    assert seen["skinny_kernel"].consts["L2P"] == 2
    r = torch.from_numpy(res.copy()).to(device)
    with Observer([LF.fused_skinny_kernel]) as seen:
        tk.silu_mul_linear(torch.from_numpy(gu).to(device), torch.from_numpy(w).to(device), residual=r, out=r)
    g, u = gu[:, :96].astype(np.float64), gu[:, 96:].astype(np.float64)
    np.testing.assert_allclose(r.cpu().numpy(), res + (g / (1 + np.exp(-g)) * u) @ w.T, rtol=1e-4, atol=1e-4)
    assert seen["fused_skinny_kernel"].consts["L2P"] == 2
    with Observer([LA.argmax_gemv_kernel]) as seen:
        ids, _ = tk.linear_argmax(torch.from_numpy(x).to(device), torch.from_numpy(w).to(device))
    assert ids.tolist() == [int(np.argmax(x.astype(np.float64) @ w.T.astype(np.float64)))]
    assert seen["argmax_gemv_kernel"].consts["L2P"] == 2


@pytest.fixture
def hopper(monkeypatch):
    """Launches replaced by Hopper compiles under PDL (as in a decode graph captured with it)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")
    return compile_launches(monkeypatch, ("matmul", "linear_fusions", "linear_argmax"),
                            lambda kernel, specs, schedule: compile_ahead(kernel, **specs, arch=90, descriptors=None,
                                                                          schedule=schedule), force_pdl=True)


def _order(ptx: str) -> tuple[list[int], int, list[int]]:
    """(prefetch lines, the wait's line, global load lines) of the kernel's body."""
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    body = lines[next(i for i, ln in enumerate(lines) if ".entry " in ln):]
    wait = next(i for i, ln in enumerate(body) if ln.startswith("griddepcontrol.wait"))
    pre = [i for i, ln in enumerate(body) if "prefetch.global.L2" in ln]
    loads = [i for i, ln in enumerate(body) if "ld.global" in ln]
    return pre, wait, loads


@pytest.mark.parametrize("setting", [2, 0])
def test_under_pdl_the_decode_gemvs_prefetch_before_the_wait(hopper, monkeypatch, setting):
    monkeypatch.setattr(MM, "GEMV_L2_PREFETCH", setting)
    monkeypatch.setattr(MM, "GEMV_L2_PREFETCH_BYTES", 1 << 40)                 # 4B's weights too
    e = lambda *s: torch.empty(s, dtype=torch.bfloat16)
    tk.linear(e(1, 2560), e(6144, 2560))                                        # qkv
    tk.silu_mul_linear(e(1, 2 * 9728), e(2560, 9728), residual=e(1, 2560))     # down, residual
    tk.linear_argmax(e(1, 2560), e(151936, 2560), out=torch.empty(1, dtype=torch.int32),
                     logprobs_out=torch.empty(1))                               # the LM head
    names = [n for n, _ in hopper]
    assert names[0] == "skinny_kernel" and "argmax_gemv_kernel" in names, names
    assert "fused_skinny_kernel" in names or "fused_split_kernel" in names, names
    for name, k in hopper:
        if name.endswith(("sum_kernel", "rows_kernel")):
            continue
        pre, wait, loads = _order(k.asm["ptx"])
        assert loads and min(loads) > wait, name
        assert (bool(pre) and max(pre) < wait) if setting else not pre, name


def test_the_down_projection_has_its_own_setting(prefetching, monkeypatch):
    monkeypatch.setattr(LF, "SILU_L2_PREFETCH", 0)
    x, w = torch.randn(1, 32), torch.randn(16, 32)
    with ts.backend("reference"), Observer([MM.skinny_kernel, LF.fused_skinny_kernel]) as seen:
        tk.linear(x, w)
        tk.silu_mul_linear(torch.randn(1, 64), w)
    assert seen["skinny_kernel"].consts["L2P"] == 2 and seen["fused_skinny_kernel"].consts["L2P"] == 0


def test_weights_over_the_size_limit_are_not_prefetched(prefetching, monkeypatch):
    monkeypatch.setattr(MM, "GEMV_L2_PREFETCH_BYTES", 16 * 32 * 4)             # a (16, 32) f32 weight
    with ts.backend("reference"), Observer([MM.skinny_kernel]) as seen:
        tk.linear(torch.randn(1, 32), torch.randn(16, 32))
    assert seen["skinny_kernel"].consts["L2P"] == 2
    with ts.backend("reference"), Observer([MM.skinny_kernel]) as seen:
        tk.linear(torch.randn(1, 32), torch.randn(17, 32))
    assert seen["skinny_kernel"].consts["L2P"] == 0
