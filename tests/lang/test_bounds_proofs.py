"""S11 proofs through integer arithmetic: loop bounds like K // BK or min(a, b) keep their
proof, unsound ones keep their masks, and the reference sanitizer confirms every maskless
access stays inside its tensor (it raises SanitizerError otherwise)."""
import numpy as np
import pytest

import tilesafe as ts


@ts.kernel(sanitize=True)
def row_sums_full_tiles(y: ts.Mut[ts.f32, (1, 1)], x: ts.Ref[ts.f32, ("M", "K")], BK: ts.Const[int], M: int, K: int):
    """Sum of each row's full BK-tiles only (the ragged tail is left out on purpose)."""
    acc = ts.zeros((1, BK), ts.f32)
    for k in range(K // BK):                                  # k <= K // BK - 1: always a full tile
        acc = acc + ts.load(x, (ts.block_id(0), k), shape=(1, BK))
    y.store(ts.sum(acc, axis=1, keepdims=True))


@ts.kernel(sanitize=True)
def prefix_blocks(y: ts.Mut[ts.f32, (1, 1)], x: ts.Ref[ts.f32, ("M", "K")], BK: ts.Const[int], M: int, K: int,
                  cap: int):
    """Sum of the first min(cap, row + 1) tiles of each row."""
    i = ts.block_id(0)
    acc = ts.zeros((1, BK), ts.f32)
    for k in range(min(ts.num_tiles(x.partition((1, BK)), 1), min(cap, i + 1))):
        acc = acc + ts.load(x, (i, k), shape=(1, BK))
    y.store(ts.sum(acc, axis=1, keepdims=True))


@ts.kernel(sanitize=True)
def shifted(y: ts.Mut[ts.f32, (1, 1)], x: ts.Ref[ts.f32, ("M", "K")], BK: ts.Const[int], M: int, K: int, s: int):
    """Tiles k - s for k in [0, K // BK): negative when s > 0, so the loads keep their masks."""
    acc = ts.zeros((1, BK), ts.f32)
    for k in range(K // BK):
        acc = acc + ts.load(x, (ts.block_id(0), k - s), shape=(1, BK))
    y.store(ts.sum(acc, axis=1, keepdims=True))


def _x(m, k, seed=0):
    return np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32)


def _specs(m, k):
    return ts.spec((m, 1), tile=(1, 1)), ts.spec((m, k))


@pytest.mark.parametrize("k", [64, 70, 100])
def test_floor_division_bound_is_proven_and_correct(k):
    report = row_sums_full_tiles.checks(*_specs(3, k), BK=16)
    assert (report.launch, report.kernel) == (2, 0)           # ragged K too: full tiles only
    x = _x(3, k)
    out = row_sums_full_tiles(ts.empty((3, 1)).partition((1, 1)), ts.tensor(x), BK=16).sync().unpartition()
    full = (k // 16) * 16
    np.testing.assert_allclose(out.numpy()[:, 0], x[:, :full].sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cap", [0, 2, 10])
def test_min_of_bounds_is_proven_and_correct(cap):
    report = prefix_blocks.checks(*_specs(5, 64), BK=16, cap=cap)
    assert report.kernel == 0
    x = _x(5, 70, seed=1)                                     # ragged: the last tile is partial
    out = prefix_blocks(ts.empty((5, 1)).partition((1, 1)), ts.tensor(x), BK=16, cap=cap).sync().unpartition()
    want = [x[i, : min(5, min(cap, i + 1)) * 16].sum() for i in range(5)]
    np.testing.assert_allclose(out.numpy()[:, 0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("s", [0, 2])
def test_subtracting_a_runtime_value_is_decided_by_the_launch(s):
    report = shifted.checks(*_specs(3, 64), BK=16, s=s)
    assert report.kernel == (1 if s > 0 else 0)
    x = _x(3, 64, seed=2)
    out = shifted(ts.empty((3, 1)).partition((1, 1)), ts.tensor(x), BK=16, s=s).sync().unpartition()
    want = x[:, : 64 - 16 * s].sum(1)                         # tiles -s .. -1 read the padding
    np.testing.assert_allclose(out.numpy()[:, 0], want, rtol=1e-5, atol=1e-5)
