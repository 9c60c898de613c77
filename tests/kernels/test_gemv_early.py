"""With matmul.GEMV_EARLY (off by default: slower on the H200), one-row GEMVs over a frozen
weight run their PREFETCH loop: the weight's first tile is then the kernel's first access,
which a PDL launch issues before its wait (runtime/freeze.py); without PDL too, so that eager
and captured steps compute alike. The form changes no result (against NumPy, both CPU
backends); an unfrozen weight, more rows, or the switch off keep the config's form."""
import dataclasses
import importlib
import os
import re

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.engine.checkpoint import LayerWeights, Weights
from tilesafe.engine.model import freeze_weights
from tilesafe.kernels import linear_fusions
from tilesafe.runtime.freeze import is_frozen

matmul = importlib.import_module("tilesafe.kernels.matmul")    # (the package's `matmul` is the function)

K, N = 96, 40


def _weights(frozen: bool, device: str = "cpu"):
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(N, K, generator=g).to(device), torch.randn(1, K, generator=g).to(device)
    return ts.freeze(w) if frozen else w, x


@pytest.fixture
def early(monkeypatch):
    monkeypatch.setattr(matmul, "GEMV_EARLY", True)


@pytest.mark.parametrize("frozen,pdl,rows,early_form", [(True, True, 1, True), (False, True, 1, False),
                                                        (True, False, 1, True), (True, True, 3, False)])
def test_a_frozen_weight_takes_the_prefetch_loop(device, early, frozen, pdl, rows, early_form):
    w, x = _weights(frozen, device)
    x = x.repeat(rows, 1)
    cfg = {"block_n": 8, "block_k": 32, "prefetch": False}
    with ts.pdl(pdl):
        got = tk.linear(x, w, config=cfg)
    assert matmul.skinny_kernel.last_launch.consts["PREFETCH"] is early_form
    np.testing.assert_allclose(got.cpu().numpy(), (x.double() @ w.double().T).cpu().numpy(), rtol=1e-5, atol=1e-5)


def test_off_by_default_a_frozen_weight_keeps_the_configs_loop(device):
    w, x = _weights(True, device)
    with ts.pdl():
        tk.linear(x, w, config={"block_n": 8, "block_k": 32, "prefetch": False})
    assert matmul.skinny_kernel.last_launch.consts["PREFETCH"] is False


def test_the_fused_gemvs_take_it_too(device, early):
    w, x = _weights(True, device)
    res = torch.randn(1, N).to(device)
    with ts.pdl():
        got = tk.linear(x, w, residual=res, config={"block_n": 8, "block_k": 32})
    assert linear_fusions.fused_skinny_kernel.last_launch.consts["PREFETCH"] is True
    np.testing.assert_allclose(got.cpu().numpy(), (x @ w.T + res).cpu().numpy(), rtol=1e-5, atol=1e-5)


def test_freeze_weights_freezes_every_tensor_of_a_model():
    def t(*shape):
        return torch.randn(shape)
    layers = [LayerWeights(qkv=t(12, 4), o=t(4, 8), q_norm=t(2), k_norm=t(2), gate_up=t(16, 4), down=t(4, 8),
                           input_norm=t(4), post_norm=t(4)) for _ in range(2)]
    w = Weights(embed=t(10, 4), layers=layers, norm=t(4), lm_head=t(10, 4))
    freeze_weights(w)
    every = [w.embed, w.norm, w.lm_head] + [getattr(la, f) for la in layers for f in
                                             ("qkv", "o", "q_norm", "k_norm", "gate_up", "down", "input_norm",
                                              "post_norm")]
    assert all(is_frozen(ts.from_torch(x)) for x in every)
    with pytest.raises(ts.OwnershipError):
        tk.linear(t(1, 4), t(4, 4), out=w.norm.view(1, 4))


@pytest.mark.parametrize("k", [96, 80, 32])          # three K tiles, a ragged last one, a single tile
def test_two_weight_tiles_ahead_give_the_same_products(device, early, monkeypatch, k):
    monkeypatch.setattr(matmul, "GEMV_EARLY_TILES", 2)
    g = torch.Generator().manual_seed(k)
    w, x, res = (t.to(device) for t in (torch.randn(N, k, generator=g), torch.randn(1, k, generator=g),
                                        torch.randn(1, N)))
    w, gn = ts.freeze(w), (torch.rand(k, generator=g) + 0.5).to(device)
    with ts.pdl():
        got = tk.linear(x, w, residual=res, config={"block_n": 8, "block_k": 32})
        assert linear_fusions.fused_skinny_kernel.last_launch.consts["DEEP"] is True
        normed = tk.rms_norm_linear(x, gn, w, 1e-6, config={"block_n": 8, "block_k": 32})
    np.testing.assert_allclose(got.cpu().numpy(), (x.double() @ w.double().T + res).cpu().numpy(), rtol=1e-5,
                               atol=1e-5)
    xn = x.double() * torch.rsqrt((x.double() ** 2).mean() + 1e-6) * gn.double()
    np.testing.assert_allclose(normed.cpu().numpy(), (xn @ w.double().T).cpu().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [96, 80, 32])          # three K tiles, a ragged last one, a single tile
def test_peeling_weight_tile_0_gives_the_same_products(device, monkeypatch, k):
    monkeypatch.setattr(matmul, "GEMV_EARLY_PEEL", True)
    g = torch.Generator().manual_seed(k + 1)
    w, x, res = (t.to(device) for t in (torch.randn(N, k, generator=g), torch.randn(1, k, generator=g),
                                        torch.randn(1, N)))
    w, gn = ts.freeze(w), (torch.rand(k, generator=g) + 0.5).to(device)
    cfg = {"block_n": 8, "block_k": 32, "prefetch": False}
    with ts.pdl():
        got = tk.linear(x, w, residual=res, config=cfg)
        assert linear_fusions.fused_skinny_kernel.last_launch.consts["PEEL"] is True
        normed = tk.rms_norm_linear(x, gn, w, 1e-6, config=cfg)
    np.testing.assert_allclose(got.cpu().numpy(), (x.double() @ w.double().T + res).cpu().numpy(), rtol=1e-5,
                               atol=1e-5)
    xn = x.double() * torch.rsqrt((x.double() ** 2).mean() + 1e-6) * gn.double()
    np.testing.assert_allclose(normed.cpu().numpy(), (xn @ w.double().T).cpu().numpy(), rtol=1e-4, atol=1e-4)
    tk.linear(x, torch.randn(N, k, device=device), residual=res, config=cfg)                      # not frozen: no peel
    assert linear_fusions.fused_skinny_kernel.last_launch.consts["PEEL"] is False


hopper = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                            reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")


@hopper
@pytest.mark.parametrize("peel,before", [(True, True), (False, False)])
def test_a_peeled_frozen_weight_tile_loads_before_the_pdl_wait(peel, before):
    """The o projection's shape (2560 x 4096, 4-column blocks): sm_90 PTX, weight `b` frozen."""
    n, k = 2560, 4096
    S = ts.spec
    specs = (S((1, n), ts.bf16, tile=(1, 4)), S((1, k), ts.bf16), S((1, k), ts.bf16), S((k,), ts.bf16),
             S((k, n), ts.bf16, strides=(1, k)), S((k,), ts.bf16), S((1, n), ts.bf16))
    sched = dataclasses.replace(ts.schedule(pdl=True, num_warps=4, num_stages=4), early=frozenset({"b"}))
    ptx = linear_fusions.fused_skinny_kernel.compile(
        *specs, PRO=linear_fusions.PLAIN, RES=linear_fusions.RES_OWN, HAS_BIAS=False, ACT=-1, TF32=False, DOT=False,
        PREFETCH=False, DEEP=False, PEEL=peel, BK=1024, L2P=0, L2K=False, eps=0.0, target="sm_90",
        schedule=sched).asm["ptx"]
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("griddepcontrol.wait"))
    early = [ln for ln in lines[:wait] if re.match(r"^(@!?%\w+\s+)?ld\.global", ln)]
    assert bool(early) == before, lines[:wait]
