"""Warp operations on the CPU executor, against their definitions written here with NumPy; the
same kernel runs on the GPU in tests/gpu/test_simt_gpu.py against this executor."""
import numpy as np
import pytest
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


@simt.kernel(contract=simt.Contract(block=(32,)))
def shifted(down: simt.Disjoint[ts.f32, ("N",)], xor: simt.Disjoint[ts.f32, ("N",)],
            x: simt.Ref[ts.f32, ("N",)], D: int, MASK: int, N: int):
    v = x[simt.global_id()]
    d = simt.shfl_down(v, D)  # E:shfl-down
    s = simt.shfl_xor(v, MASK)
    for p in down.permits(simt.per_thread()):
        down[p] = d
    for p in xor.permits(simt.per_thread()):
        xor[p] = s


def shift(x, d, mask):
    down, xor = torch.full((32,), float("nan")), torch.full((32,), float("nan"))
    shifted(down, xor, x, d, mask).sync()
    return down, xor


def test_shuffles_read_the_low_five_bits_of_their_lane_operand():
    # PTX shfl.sync takes b[4:0]: shfl_down by d reads lane + (d & 31) (the top lanes keep their own
    # value, no wrap-around); shfl_xor by m reads lane ^ (m & 31). The H200 reverses the warp for
    # m = -1, as for 31 (tests/gpu/test_simt_gpu.py compares the two on the GPU).
    x = torch.arange(32, dtype=torch.float32) + 100
    lanes = torch.arange(32)
    for d in (0, 1, 31, 32, 33, 1000):
        down, _ = shift(x, d, 0)
        want = torch.where(lanes + (d & 31) < 32, x[(lanes + (d & 31)) % 32], x)
        assert torch.equal(down, want), d
    for mask in (31, 32, 33, -1, -32, 1 << 40):      # 1 << 40: its low five bits are 0, the caller's lane
        _, xor = shift(x, 0, mask)
        assert torch.equal(xor, x[lanes ^ (mask & 31)]), mask
    _, xor = shift(x, 0, 31)
    assert torch.equal(xor, x.flip(0))


def test_shfl_down_by_a_negative_delta_is_refused():
    from simt_helpers import assert_diagnostic
    for d in (-1, 1 << 31):         # the GPU would shift by the low five bits: never what a program means
        with pytest.raises(ts.SanitizerError) as ei:
            shift(torch.zeros(32), d, 0)
        assert_diagnostic(ei.value, __file__, "E:shfl-down", f"shfl_down by delta {d}, outside 0 <= delta < 2**31")


@simt.kernel(contract=simt.Contract(block=(32,)))
def vote(votes: simt.Disjoint[ts.i64, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    b = simt.ballot(x[simt.global_id()] > 0.0)
    for p in votes.permits(simt.per_thread()):
        votes[p] = b


def test_a_ballot_is_an_unsigned_32_bit_mask():
    # CUDA's __ballot_sync returns an unsigned int: lane 31's vote is bit 31, never a sign
    for lanes, want in (([31], 1 << 31), (range(32), (1 << 32) - 1), ([0, 31], (1 << 31) + 1), ([], 0)):
        x = torch.full((32,), -1.0)
        x[list(lanes)] = 1.0
        votes = torch.full((32,), -7, dtype=torch.int64)
        vote(votes, x).sync()
        assert votes.tolist() == [want] * 32, lanes
