"""Frozen weights read before the PDL wait on a Hopper GPU (runtime/freeze.py; matmul.GEMV_EARLY,
off by default, switched on here).

A chain of one-row GEMVs over frozen weights, each reading the vector the one before wrote,
captured with PDL and replayed: the code loads the weight before `gdc_wait()` and the vector
after it, and every replay gives the float64 oracle's values. Writing a frozen weight inside
the capture is refused, and so is a SIMT kernel's repeated launch into memory frozen since.

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_freeze_gpu.py -m gpu -q
"""
import importlib

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe import simt

pytestmark = pytest.mark.gpu
MM = importlib.import_module("tilesafe.kernels.matmul")
FUSIONS = importlib.import_module("tilesafe.kernels.linear_fusions")
E, LAYERS, REPLAYS = 1024, 6, 20
ONE_SPLIT = {"block_n": 8, "block_k": 256, "split_k": 1}      # one launch a GEMV (no split-K pair)


def test_a_pdl_chain_of_gemvs_over_frozen_weights_loads_them_early_and_computes_right(monkeypatch):
    monkeypatch.setattr(MM, "GEMV_EARLY", True)
    g = torch.Generator(device="cuda").manual_seed(0)
    ws = [ts.freeze((torch.randn(E, E, generator=g, device="cuda") / E ** 0.5).to(torch.bfloat16))
          for _ in range(LAYERS)]
    x0 = torch.randn(1, E, generator=g, device="cuda").to(torch.bfloat16)
    xs = [x0.clone(), torch.empty_like(x0)]

    def chain():
        for n, w in enumerate(ws):
            tk.linear(xs[n % 2], w, residual=xs[n % 2], out=xs[(n + 1) % 2], config=ONE_SPLIT)   # x @ w.T + x

    with ts.pdl(True):
        chain()                                           # compiles outside the capture
    torch.cuda.synchronize()
    gen = FUSIONS.fused_skinny_kernel.last_launch.compiled.last_generated.text
    assert FUSIONS.fused_skinny_kernel.last_launch.consts["PREFETCH"] is True
    head = gen[:gen.index("gdc_wait()")]
    assert "b_ptr" in head and "tl.load(b_ptr" in head, gen[:2000]      # the weight's first tile
    assert "tl.load(a_ptr" not in head, gen[:2000]                      # the vector after the wait
    with ts.graph(pdl=True) as graph:
        chain()
    for _ in range(REPLAYS):
        xs[0].copy_(x0)
        graph.replay()
    torch.cuda.synchronize()
    want = x0.double()
    for n, w in enumerate(ws):                            # bf16 rounding after each layer, as the kernels
        want = ((want @ w.double().T).to(torch.bfloat16).double() + want).to(torch.bfloat16).double()
    got = xs[LAYERS % 2].double()
    assert torch.allclose(got, want, rtol=2e-2, atol=2e-2), (got - want).abs().max()


def test_writing_a_frozen_weight_in_a_capture_is_refused():
    w = ts.freeze(torch.randn(64, 64, device="cuda"))
    x, other = torch.randn(1, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    with pytest.raises(ts.OwnershipError, match="frozen"):
        with ts.graph(pdl=True):
            tk.linear(x, other, out=w[:1])


@simt.kernel(contract=simt.Contract(block=(32,)))
def fill(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.chunk(1)):
        out[p] = 5.0


def test_a_simt_kernels_repeated_launch_into_memory_frozen_since_is_refused():
    out = torch.zeros(64, device="cuda")
    for _ in range(3):
        fill(out)                                  # the layout's lean GPU path (simt/gpu_repeat.py)
    torch.cuda.synchronize()
    ts.freeze(out)
    with pytest.raises(ts.OwnershipError, match="argument `out` of `fill` is written, but its bytes are frozen"):
        fill(out)
    with pytest.raises(ts.OwnershipError, match="frozen"):
        fill(out[:64].view(64))                    # a torch view of it, the same layout
    assert (out == 5.0).all()
