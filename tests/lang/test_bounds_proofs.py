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


@ts.kernel(sanitize=True)
def next_tile_clamped(y: ts.Mut[ts.f32, (1, 1)], x: ts.Ref[ts.f32, ("M", "K")], BK: ts.Const[int], M: int, K: int):
    """Each tile plus the next one, the last tile standing in for the one past the end."""
    last = ts.num_tiles(x.partition((1, BK)), 1) - 1
    acc = ts.zeros((1, BK), ts.f32)
    for k in range(ts.num_tiles(x.partition((1, BK)), 1)):
        acc = acc + ts.load(x, (ts.block_id(0), k), shape=(1, BK))
        acc = acc + ts.load(x, (ts.block_id(0), ts.minimum(k + 1, last)), shape=(1, BK))
    y.store(ts.sum(acc, axis=1, keepdims=True))


@pytest.mark.parametrize("k", [64, 70])
def test_min_takes_the_smaller_upper_bound(k):
    # min(k + 1, last) <= last: every tile index is in range, proven at launch when BK | K
    report = next_tile_clamped.checks(*_specs(3, k), BK=16)
    assert (report.launch, report.kernel) == ((3, 0) if k % 16 == 0 else (1, 2))
    x = _x(3, k, seed=3)
    out = next_tile_clamped(ts.empty((3, 1)).partition((1, 1)), ts.tensor(x), BK=16).sync().unpartition()
    padded = np.pad(x, ((0, 0), (0, -k % 16)))
    tiles = padded.reshape(3, -1, 16).sum(2)
    want = tiles.sum(1) + tiles[:, 1:].sum(1) + tiles[:, -1]
    np.testing.assert_allclose(out.numpy()[:, 0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("s", [0, 2])
def test_subtracting_a_runtime_value_is_decided_by_the_launch(s):
    report = shifted.checks(*_specs(3, 64), BK=16, s=s)
    assert report.kernel == (1 if s > 0 else 0)
    x = _x(3, 64, seed=2)
    out = shifted(ts.empty((3, 1)).partition((1, 1)), ts.tensor(x), BK=16, s=s).sync().unpartition()
    want = x[:, : 64 - 16 * s].sum(1)                         # tiles -s .. -1 read the padding
    np.testing.assert_allclose(out.numpy()[:, 0], want, rtol=1e-5, atol=1e-5)


@ts.kernel(sanitize=True)
def head_rows(y: ts.Mut[ts.f32, (1, 1, 16)], x: ts.Ref[ts.f32, ("Z", "H", "S")], Z: int, H: int, S: int):
    """Block zh reads row (zh // H, zh % H): indices through // and % by a runtime value."""
    zh = ts.block_id(0)
    y.store(ts.load(x, (zh // H, zh % H, ts.block_id(2)), shape=(1, 1, 16)) * 2.0)


@pytest.mark.parametrize("z, h, s", [(2, 3, 32), (1, 5, 40)])
def test_division_and_modulo_by_a_runtime_value(z, h, s):
    report = head_rows.checks(ts.spec((z * h, 1, s), tile=(1, 1, 16)), ts.spec((z, h, s)))
    assert report.kernel == (0 if s % 16 == 0 else 2)
    x = np.random.default_rng(4).standard_normal((z, h, s)).astype(np.float32)
    out = head_rows(ts.empty((z * h, 1, s)).partition((1, 1, 16)), ts.tensor(x)).sync().unpartition()
    np.testing.assert_allclose(out.numpy()[:, 0, :], (x * 2).reshape(z * h, s), rtol=1e-6)


def test_flash_attention_loads_are_proven_when_sizes_divide():
    from tilesafe.kernels.attention import flash_kernel
    args = dict(qk_scale=0.1, T=ts.f16, NEG_SCALE=False, GROUP=2, BM=64, BN=64)
    for causal in (False, True):
        for s in (256, 200):
            report = flash_kernel.checks(ts.spec((4, s, 64), ts.f16, tile=(1, 64, 64)), ts.spec((1, 4, s, 64), ts.f16),
                                         ts.spec((1, 2, s, 64), ts.f16), ts.spec((1, 2, s, 64), ts.f16),
                                         CAUSAL=causal, **args)
            if s % 64 == 0:
                assert (report.launch, report.kernel) == (6, 0), str(report)
            else:   # ragged keys and queries: the edge tiles keep their masks
                assert report.kernel > 0, str(report)


@ts.kernel(sanitize=True)
def stacked_rows(y: ts.Mut[ts.f32, (1, 16)], x: ts.Ref[ts.f32, ("R", "C")], per: int, R: int, C: int):
    """Block (b, j) reads row tile b * per + j % per: a product of two runtime values."""
    b, j = ts.block_id(0), ts.block_id(1)
    y.store(ts.load(x, (b * per + j % per, 0), shape=(1, 16)) + 1.0)


@pytest.mark.parametrize("per", [3, -1, 2 ** 30])
def test_a_product_of_runtime_values_is_proven_only_when_signs_and_size_allow(per):
    """b * per (b a block id, per a scalar) is a launch proof when per >= 0 and the product
    cannot wrap in i32; a negative or huge `per` keeps the row mask (and stays correct)."""
    report = stacked_rows.checks(ts.spec((2, 48), tile=(1, 16)), ts.spec((6, 16)), per=per)
    assert report.launch + report.kernel == 2 and report.kernel == (0 if per == 3 else 1), str(report)
    if per == 3:
        x = np.random.default_rng(5).standard_normal((6, 16)).astype(np.float32)
        out = stacked_rows(ts.empty((2, 48)).partition((1, 16)), ts.tensor(x), per=per).sync().unpartition()
        want = np.stack([np.concatenate([x[b * 3 + j % 3] for j in range(3)]) for b in range(2)]) + 1.0
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


@ts.kernel(sanitize=True)
def scaled_down(y: ts.Mut[ts.f32, (1, 16)], x: ts.Ref[ts.f32, ("R", "C")], per: int, d: int, R: int, C: int):
    """Row (b * per) // d: fine in exact arithmetic, but b * per can wrap in i32."""
    y.store(ts.load(x, ((ts.block_id(0) * per) // d, 0), shape=(1, 16)))


def test_a_product_that_can_wrap_proves_nothing():
    specs = ts.spec((4, 16), tile=(1, 16)), ts.spec((4, 16))
    assert scaled_down.checks(*specs, per=2 ** 28, d=2 ** 28).kernel == 0        # 3 * 2**28 fits in i32
    assert scaled_down.checks(*specs, per=2 ** 30, d=2 ** 30).kernel == 1        # 3 * 2**30 would wrap
