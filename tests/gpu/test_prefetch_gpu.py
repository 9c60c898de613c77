"""`ts.prefetch` before the PDL wait on a Hopper GPU: sound even on bytes the kernel before writes.

A chain of kernels, each of which prefetches (before its wait) exactly the tile the kernel
before it is writing, then reads it after the wait, is captured with PDL and replayed many
times: every replay must give the NumPy oracle's integers, so a line pulled into L2 while its
writer still ran is never read stale. The decode GEMVs with their weight prefetch on give
the same bits as with it off.

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_prefetch_gpu.py -m gpu -q
"""
import importlib

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.bench.observe import Observer

pytestmark = pytest.mark.gpu
N, B = 1 << 20, 1024
P = 65521
CHAIN = [(3, 1), (5, 2), (7, 3)]
ROUNDS, REPLAYS = 10, 20


@ts.kernel
def affine_reversed(z: ts.Mut[ts.i32, ("B",)], x: ts.Ref[ts.i32, ("N",)], B: ts.Const[int], KEEP: ts.Const[bool],
                    N: int, m: int, c: int):
    src = ts.num_blocks(0) - 1 - ts.block_id(0)
    ts.prefetch(x, (src,), shape=(B,), keep=KEEP)        # the tile the kernel before is writing
    t = ts.load(x, (src,), shape=(B,))
    z.store((t * m + c) % P)


def oracle(x0: np.ndarray) -> list:
    xs = [x0, None, None]
    for _ in range(ROUNDS):
        for k, (m, c) in enumerate(CHAIN):
            tiles = xs[k].reshape(-1, B)[::-1].reshape(-1).astype(np.int64)
            xs[(k + 1) % 3] = ((tiles * m + c) % P).astype(np.int32)
    return xs


def chain(xs, keep) -> None:
    for _ in range(ROUNDS):
        for k, (m, c) in enumerate(CHAIN):
            affine_reversed(xs[(k + 1) % 3].partition((B,)), xs[k], KEEP=keep, m=m, c=c)


@pytest.mark.parametrize("keep", [False, True])
def test_prefetching_what_the_kernel_before_writes_never_reads_it_stale(keep):
    x0 = np.random.default_rng(2).integers(0, P, N, dtype=np.int32)
    xs = [ts.tensor(x0, device="cuda"), ts.zeros(N, ts.i32, device="cuda"), ts.zeros(N, ts.i32, device="cuda")]
    with ts.pdl(True):
        chain(xs, keep)                                   # compiles outside the capture
    torch.cuda.synchronize()
    xs = [ts.tensor(x0, device="cuda"), ts.zeros(N, ts.i32, device="cuda"), ts.zeros(N, ts.i32, device="cuda")]
    with ts.graph(pdl=True) as g:
        chain(xs, keep)
    src = affine_reversed.last_launch.compiled.source
    assert src.index("prefetch.global.L2") < src.index("gdc_wait()")     # issued before the wait
    want = [x0, None, None]
    for r in range(REPLAYS):
        g.replay()
        want = oracle(want[0])
        got = [x.numpy() for x in xs]                     # waits for the replay (S9)
        for i in range(3):
            bad = np.flatnonzero(got[i] != want[i])[:8]
            assert np.array_equal(got[i], want[i]), f"replay {r}: x{i} differs at {bad}"


def test_the_decode_gemvs_give_the_same_bits_with_their_prefetch(monkeypatch):
    mm = importlib.import_module("tilesafe.kernels.matmul")
    lf = importlib.import_module("tilesafe.kernels.linear_fusions")
    gemvs = [mm.skinny_kernel, mm.split_k_kernel, lf.fused_skinny_kernel, lf.fused_split_kernel]
    monkeypatch.setattr(mm, "GEMV_L2_PREFETCH_BYTES", 1 << 40)   # these weights (50-100 MB) are over the default
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1, 2560, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(9728 * 2, 2560, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    wd = (torch.randn(2560, 9728, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    res0 = torch.randn(1, 2560, device="cuda", generator=g).to(torch.bfloat16)
    outs = []
    for p, keep in ((0, False), (2, False), (4, True)):
        monkeypatch.setattr(mm, "GEMV_L2_PREFETCH", p)
        monkeypatch.setattr(mm, "GEMV_L2_KEEP", keep)
        gu, res = torch.empty(1, 9728 * 2, device="cuda", dtype=torch.bfloat16), res0.clone()
        with ts.pdl(True), Observer(gemvs) as seen:      # full path: the plans do not carry the setting over
            tk.linear(x, w, out=gu)
            tk.silu_mul_linear(gu, wd, residual=res, out=res)
        torch.cuda.synchronize()
        assert len(seen) >= 2 and all(f.consts["L2P"] == p for f in seen.values()), seen   # the setting ran
        outs.append((gu.clone(), res.clone()))
    ref = (x.float() @ w.float().T).to(torch.bfloat16)
    assert torch.allclose(outs[0][0].float(), ref.float(), rtol=2e-2, atol=2e-2)
    for gu, res in outs[1:]:
        assert torch.equal(gu, outs[0][0]) and torch.equal(res, outs[0][1])
