"""Warp operations on the CPU executor, against their definitions written here with NumPy; the
same kernel runs on the GPU in tests/gpu/test_simt_gpu.py against this executor."""
import numpy as np
import torch

import tilesafe as ts
from tilesafe import simt


@simt.kernel(contract=simt.Contract(block=(64,)))
def warp_ops(down: simt.Disjoint[ts.f32, ("N",)], xor: simt.Disjoint[ts.f32, ("N",)],
             total: simt.Disjoint[ts.f32, ("N",)], top: simt.Disjoint[ts.f32, ("N",)],
             votes: simt.Disjoint[ts.i64, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    v = x.get(simt.global_id(), 0.0)
    d = simt.shfl_down(v, 3)
    s = simt.shfl_xor(v, 5)
    t = simt.warp_sum(v)
    m = simt.warp_max(v)
    b = simt.ballot(v > 0.0)
    for p in down.permits(simt.per_thread()):
        down[p] = d
    for p in xor.permits(simt.per_thread()):
        xor[p] = s
    for p in total.permits(simt.per_thread()):
        total[p] = t
    for p in top.permits(simt.per_thread()):
        top[p] = m
    for p in votes.permits(simt.per_thread()):
        votes[p] = b


def run(x):
    n = x.shape[0]
    outs = [torch.full((n,), float("nan"), device=x.device) for _ in range(4)] + \
        [torch.full((n,), -1, dtype=torch.int64, device=x.device)]
    warp_ops(*outs, x).sync()
    return [o.cpu().numpy() for o in outs]


def oracle(x: np.ndarray):
    lanes = np.arange(32)
    w = x.reshape(-1, 32)                               # (warps, 32)
    down = np.where(lanes + 3 < 32, np.roll(w, -3, axis=1), w)
    xor = w[:, lanes ^ 5]
    total = np.repeat(w.sum(1, keepdims=True), 32, 1)
    top = np.repeat(w.max(1, keepdims=True), 32, 1)
    votes = np.repeat(((w > 0) << lanes).sum(1, keepdims=True), 32, 1)
    return [a.reshape(-1) for a in (down, xor, total, top, votes)]


def test_warp_operations_follow_their_definitions():
    x = torch.randn(128, generator=torch.Generator().manual_seed(7))
    got = run(x)
    want = oracle(x.numpy())
    for name, g, w in zip(("shfl_down", "shfl_xor", "warp_sum", "warp_max", "ballot"), got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=name)
