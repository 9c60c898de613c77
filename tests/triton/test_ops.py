"""Op-level kernels through the generated Triton (CPU interpreter) against NumPy: saturating
casts, floor division, where, reductions, cumsum, gather, join/permute, while, if/else,
sub-tiles, windowed persistent walks, closed-form math, valid, S15 and pointer ops."""
import math

import numpy as np
import pytest

import tilesafe as ts
from triton_helpers import NP, close, poisoned


# --- casts --------------------------------------------------------------------------------------
@ts.kernel
def convert(z: ts.Mut["D", ("B",)], x: ts.Ref["S", ("N",)], S: ts.Const[ts.DType], D: ts.Const[ts.DType],
            B: ts.Const[int], N: int):
    z.store(ts.astype(ts.load_tile_like(x, z), D))


def _convert(x: np.ndarray, dst: str) -> np.ndarray:
    z = poisoned(x.shape, dst)
    return convert(z.partition((16,)), ts.tensor(x), D=getattr(ts, dst)).sync().unpartition().numpy()


SATURATING = [
    ("i32", [3.7, -3.7, 0.5, 3e9, -3e9, 1e20, np.inf, -np.inf, np.nan, 2147483520.0],
     [3, -3, 0, 2**31 - 1, -2**31, 2**31 - 1, 2**31 - 1, -2**31, 0, 2147483520]),
    ("i8", [127.9, -128.9, 300.0, -300.0, 5.99, -5.99, np.nan, -0.9, np.inf, 100.0],
     [127, -128, 127, -128, 5, -5, 0, 0, 127, 100]),
    ("u8", [255.9, 256.0, -1.0, -100.0, 3.5, 1e9, 0.99, np.nan, 17.0, 128.5],
     [255, 255, 0, 0, 3, 255, 0, 0, 17, 128]),
    ("i64", [1e19, -1e19, 2.5, -2.5, np.nan, 9e18, 0.0, 1.0, -1.0, 7.75],
     [2**63 - 1, -2**63, 2, -2, 0, 9000000202358128640, 0, 1, -1, 7]),
]


@pytest.mark.parametrize("dst,inputs,want", SATURATING, ids=[r[0] for r in SATURATING])
def test_float_to_int_truncates_saturates_and_sends_nan_to_zero(dst, inputs, want):
    got = _convert(np.array(inputs, np.float32), dst)
    assert got.dtype == NP[dst] and got.tolist() == want


def test_f16_to_int_and_f32_to_f16_overflow():
    h = np.array([1.5, -1.5, 60000.0, -60000.0, np.nan, 40000.0, 0.25, -7.0], np.float16)
    assert _convert(h, "i16").tolist() == [1, -1, 32767, -32768, 0, 32767, 0, -7]
    f = np.array([1e5, -1e5, 65504.0, 1.0 / 3, 2.0 ** -25, np.inf, -0.0, 70000.0], np.float32)
    got = _convert(f, "f16")
    assert np.array_equal(got.view(np.uint16), f.astype(np.float16).view(np.uint16))   # RNE, overflow -> inf


def test_int_casts_wrap_and_bool():
    x = np.array([127, 128, 255, 256, -129, 1000, -1, 0], np.int32)
    assert np.array_equal(_convert(x, "i8"), x.astype(np.int8))
    assert _convert(x, "bool_").tolist() == [v != 0 for v in x.tolist()]
    assert np.array_equal(_convert(x, "f32"), x.astype(np.float32))


# --- integer division ----------------------------------------------------------------------------
@ts.kernel
def divmod_k(q: ts.Mut[ts.i32, (4, "B")], x: ts.Ref[ts.i32, ("N",)], y: ts.Ref[ts.i32, ("N",)],
             B: ts.Const[int], N: int):
    a = ts.load(x, (ts.block_id(1),), shape=(B,))
    b = ts.load(y, (ts.block_id(1),), shape=(B,), padding=1)
    rows = ts.join(ts.join(a // b, a % b), ts.join(a // -3, a % 4))   # (B, 2, 2)
    q.store(ts.reshape(ts.permute(rows, (2, 1, 0)), (4, B)))


def test_floor_division_and_modulo_follow_python():
    x = np.array([7, -7, 7, -7, 0, 5, -5, 9, -9, 2**31 - 1, -2**31 + 1, 13, -13, 3, -1, 6], np.int32)
    y = np.array([2, 2, -2, -2, 3, 0, 0, 3, 3, 7, 7, -5, -5, 1, 4, -4], np.int32)
    got = divmod_k(poisoned((4, 16), "i32").partition((4, 8)), ts.tensor(x), ts.tensor(y)).sync()
    got = got.unpartition().numpy()
    py_div = [a // b if b else 0 for a, b in zip(x.tolist(), y.tolist())]
    py_mod = [a % b if b else a for a, b in zip(x.tolist(), y.tolist())]
    # rows: (B, 2, 2) [b, m, n] permuted to [n, m, b] -> row n * 2 + m
    assert got[0].tolist() == py_div
    assert got[1].tolist() == py_mod
    assert got[2].tolist() == [a // -3 for a in x.tolist()]
    assert got[3].tolist() == [a % 4 for a in x.tolist()]


# --- where, math, reductions, scans -------------------------------------------------------------
@ts.kernel
def leaky(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    z.store(ts.where(t > 0, t, 0.125 * t) + ts.maximum(t, 1.0) - ts.minimum(t, -1.0))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_where_maximum_minimum(dtype):
    x = np.random.default_rng(10).uniform(-3, 3, 50).astype(NP[dtype])
    got = leaky(poisoned(50, dtype).partition((32,)), ts.tensor(x)).sync().unpartition().numpy()
    x64 = x.astype(np.float64)
    close(got, np.where(x64 > 0, x64, 0.125 * x64) + np.maximum(x64, 1) - np.minimum(x64, -1), dtype)


@ts.kernel
def math_k(z: ts.Mut["T", (8, "B")], x: ts.Ref["T", ("N",)], T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    t = ts.load(x, (ts.block_id(1),), shape=(B,), padding=1.0)
    z.store(ts.join(ts.join(ts.join(ts.tanh(t), ts.erf(t)), ts.join(ts.sigmoid(t), ts.exp(t))),
                    ts.join(ts.join(ts.log(ts.abs(t) + 1.0), ts.rsqrt(ts.abs(t) + 0.5)),
                            ts.join(ts.floor(t), ts.ceil(t)))).reshape((B, 8)).permute((1, 0)))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_closed_form_tanh_erf_and_library_math(dtype):
    x = np.random.default_rng(11).uniform(-4, 4, 40).astype(NP[dtype])
    x[:4] = [0.0, -0.0, 3.0, -3.0]
    got = math_k(poisoned((8, 40), dtype).partition((8, 16)), ts.tensor(x)).sync().unpartition().numpy()
    v = x.astype(np.float64)
    erf = np.array([math.erf(t) for t in v])
    # the order join builds: ((tanh, erf), (sigmoid, exp)), ((log, rsqrt), (floor, ceil))
    want = [np.tanh(v), erf, 1 / (1 + np.exp(-v)), np.exp(v), np.log(np.abs(v) + 1), 1 / np.sqrt(np.abs(v) + 0.5),
            np.floor(v), np.ceil(v)]
    order = [0, 4, 2, 6, 1, 5, 3, 7]   # join's last axis is the fastest-varying bit
    for row, k in enumerate(order):
        close(got[row], want[k], dtype)


@ts.kernel
def reduce_rows(z: ts.Mut[ts.f32, ("BM", 8)], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int], BN: ts.Const[int],
                M: int, N: int):
    lo = ts.load(x, (ts.block_id(0), 0), shape=(BM, BN), padding=-float("inf"))   # for max/argmax
    hi = ts.load(x, (ts.block_id(0), 0), shape=(BM, BN), padding=float("inf"))    # for min/argmin
    zero = ts.load(x, (ts.block_id(0), 0), shape=(BM, BN))                         # for sum
    cols = (ts.sum(zero, axis=1), ts.max(lo, axis=1), ts.min(hi, axis=1), ts.argmax(lo, axis=1).astype(ts.f32),
            ts.argmin(hi, axis=1).astype(ts.f32), ts.sum(zero), ts.max(lo), ts.min(hi))
    out = ts.zeros((BM, 8), ts.f32)
    lane = ts.expand_dims(ts.arange(0, 8), 0)     # (1, 8)
    for k in (0, 1, 2, 3, 4, 5, 6, 7):            # unrolled: k is a compile-time int
        out = ts.where(lane == k, ts.expand_dims(ts.broadcast_to(cols[k], (BM,)), 1), out)
    z.store(out)


def test_reductions_with_padding():
    x = np.random.default_rng(12).standard_normal((6, 13)).astype(np.float32)
    x[2, 5] = x[2, 9] = 50.0   # ties: the first index wins, like NumPy
    got = reduce_rows(poisoned((6, 8), "f32").partition((4, 8)), ts.tensor(x), BN=16).sync().unpartition().numpy()
    for b0 in (0, 4):
        rows = x[b0:b0 + 4]
        want = np.stack([rows.sum(1), rows.max(1), rows.min(1), rows.argmax(1), rows.argmin(1),
                         np.full(len(rows), rows.sum()), np.full(len(rows), rows.max()), np.full(len(rows), rows.min())], 1)
        close(got[b0:b0 + 4], want, "f32")


@ts.kernel
def scan(z: ts.Mut["T", ("BM", "BN")], x: ts.Ref["T", ("M", "N")], T: ts.Const[ts.DType], BM: ts.Const[int],
         BN: ts.Const[int], M: int, N: int):
    z.store(ts.cumsum(ts.load_tile_like(x, z), axis=1))


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
def test_cumsum_along_rows(dtype):
    rng = np.random.default_rng(13)
    x = rng.integers(-5, 6, (5, 20)).astype(NP[dtype]) if dtype == "i32" else rng.standard_normal((5, 20)).astype(NP[dtype])
    got = scan(poisoned((5, 20), dtype).partition((4, 32)), ts.tensor(x)).sync().unpartition().numpy()
    want = np.cumsum(x.astype(np.float64), axis=1)
    if dtype == "i32":
        assert np.array_equal(got, want.astype(np.int32))
    else:
        close(got, want, dtype)


# --- gather, join, permute -------------------------------------------------------------------------
@ts.kernel
def embed(z: ts.Mut[ts.f32, ("BT", "D")], table: ts.Ref[ts.f32, ("V", "D")], ids: ts.Ref[ts.i32, ("T",)],
          BT: ts.Const[int], D: ts.Const[int], V: int, T: int):
    pos = ts.load(ids, (ts.block_id(0),), shape=(BT,), padding=-1)
    z.store(ts.gather(table, pos, axis=0, shape=(BT, D), index=(0, 0), padding=-2.0))


def test_gather_rows_pads_out_of_range_positions():
    rng = np.random.default_rng(14)
    table = rng.standard_normal((10, 16)).astype(np.float32)
    ids = np.array([3, 0, 9, 10, -1, 4, 4, 7, 2, 100, 1], np.int32)
    got = embed(poisoned((11, 16), "f32").partition((8, 16)), ts.tensor(table), ts.tensor(ids)).sync()
    want = np.stack([table[i] if 0 <= i < 10 else np.full(16, -2.0, np.float32) for i in ids])
    assert np.array_equal(got.unpartition().numpy(), want)


@ts.kernel
def interleave(z: ts.Mut["T", (2, "B")], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)], T: ts.Const[ts.DType],
               B: ts.Const[int], N: int):
    i = ts.block_id(1)
    pair = ts.join(ts.load(x, (i,), shape=(B,)), ts.load(y, (i,), shape=(B,)))   # (B, 2)
    z.store(ts.permute(pair, (1, 0)))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_join_and_permute(dtype):
    rng = np.random.default_rng(15)
    x, y = rng.standard_normal(20).astype(NP[dtype]), rng.standard_normal(20).astype(NP[dtype])
    got = interleave(poisoned((2, 20), dtype).partition((2, 8)), ts.tensor(x), ts.tensor(y)).sync()
    assert np.array_equal(got.unpartition().numpy(), np.stack([x, y]))


# --- control flow ----------------------------------------------------------------------------------
@ts.kernel
def halve_until(z: ts.Mut[ts.f32, ("B",)], n: ts.Mut[ts.i32, ("B",)], x: ts.Ref[ts.f32, ("N",)],
                B: ts.Const[int], N: int, limit: float):
    t = ts.abs(ts.load_tile_like(x, z))
    steps = 0
    while ts.max(t) > limit:
        t = t * 0.5
        steps = steps + 1
    z.store(t)
    n.store(ts.full((B,), steps, ts.i32))


def test_while_loop_with_carried_scalar_and_tile():
    x = np.array([1.0, 40.0, -3.0, 0.5, 100.0, 7.0], np.float32)
    z, n = poisoned(6, "f32").partition((4,)), poisoned(6, "i32").partition((4,))
    zp, npart = halve_until(z, n, ts.tensor(x), limit=2.0).sync()
    got, steps = zp.unpartition().numpy(), npart.unpartition().numpy()
    for b0 in (0, 4):
        t, k = np.abs(x[b0:b0 + 4]).astype(np.float64), 0
        while t.max() > 2.0:
            t, k = t * 0.5, k + 1
        assert np.array_equal(got[b0:b0 + 4], t[:len(got[b0:b0 + 4])].astype(np.float32))
        assert (steps[b0:b0 + 4] == k).all()


@ts.kernel
def branch(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, s: int):
    t = ts.load_tile_like(x, z)
    k = 0
    if s > 0:
        t = t * 2.0
        k = s
    else:
        t = t - 1.0
        k = 5
    if ts.block_id(0) == 1:
        t = t + 100.0
    z.store(t + k)


@pytest.mark.parametrize("s", [3, 1, 0, -4])
def test_if_else_with_results(s):
    x = np.random.default_rng(16).standard_normal(12).astype(np.float32)
    got = branch(poisoned(12, "f32").partition((8,)), ts.tensor(x), s=s).sync().unpartition().numpy()
    want = (x * 2 + s if s > 0 else x - 1 + 5).astype(np.float32)
    want[8:] += 100
    close(got, want, "f32")


@ts.kernel
def blocks2d(z: ts.Mut[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int], BN: ts.Const[int],
             M: int, N: int):
    for j in z.subtiles((4, 8)):
        t = ts.load(x, (ts.block_id(0) * (BM // 4) + j[0], ts.block_id(1) * (BN // 8) + j[1]), shape=(4, 8))
        z.store(t * 10.0 + ts.astype(j[0] * 100 + j[1], ts.f32), j)


def test_two_dimensional_subtiles():
    x = np.random.default_rng(17).standard_normal((10, 20)).astype(np.float32)
    got = blocks2d(poisoned((10, 20), "f32").partition((8, 16)), ts.tensor(x)).sync().unpartition().numpy()
    r, c = np.meshgrid(np.arange(10), np.arange(20), indexing="ij")
    close(got, x * 10 + ((r % 8) // 4) * 100 + (c % 16) // 8, "f32")


@ts.kernel
def bump_window(z: ts.MutTiles[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int],
                BN: ts.Const[int], M: int, N: int, r0: int, rn: int, c0: int, cn: int):
    for idx in z.tiles(within=((r0, rn), (c0, cn)), group=2):
        z.store(ts.load(x, idx, shape=(BM, BN)) + 1.0, idx)


@pytest.mark.parametrize("window", [(1, 2, 0, 3), (0, 9, 2, 9), (3, 1, 1, 1), (0, 0, 0, 2)])
def test_windowed_persistent_walk_writes_only_its_tiles(window):
    x = np.random.default_rng(18).standard_normal((20, 36)).astype(np.float32)
    z = poisoned((20, 36), "f32")
    r0, rn, c0, cn = window
    got = bump_window(z.partition((8, 16)), ts.tensor(x), r0=r0, rn=rn, c0=c0, cn=cn).sync().unpartition().numpy()
    want = np.full((20, 36), np.nan, np.float32)
    for i in range(r0, r0 + rn):
        for j in range(c0, c0 + cn):
            want[i * 8:(i + 1) * 8, j * 16:(j + 1) * 16] = x[i * 8:(i + 1) * 8, j * 16:(j + 1) * 16] + 1
    np.testing.assert_array_equal(got, want)


@ts.kernel
def edges(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    t = ts.load(x, (ts.block_id(0) - 1,), shape=(B,), padding=7.0)    # block 0 reads tile -1: all padding
    z.store(ts.where(ts.valid(t), t, -1.0) + ts.astype(ts.valid(t), ts.f32) * 0.5)


def test_negative_tile_index_pads_and_valid_marks_in_bounds():
    x = np.arange(20, dtype=np.float32)
    got = edges(poisoned(20, "f32").partition((8,)), ts.tensor(x)).sync().unpartition().numpy()
    want = np.concatenate([np.full(8, -1.0), x[0:8] + 0.5, x[8:12] + 0.5]).astype(np.float32)
    np.testing.assert_array_equal(got, want)


# --- S15 and unsafe pointer ops --------------------------------------------------------------------
@ts.kernel
def rewrite(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)
    z.store(z.load() * 3.0)


def test_load_after_store_of_own_output_sees_it_and_has_a_barrier():
    x = np.arange(10, dtype=np.float32)
    got = rewrite(poisoned(10, "f32").partition((8,)), ts.tensor(x)).sync().unpartition().numpy()
    np.testing.assert_array_equal(got, (x + 1) * 3)
    assert "tl.debug_barrier()" in rewrite.source(ts.spec(10, tile=8), ts.spec(10))


@ts.kernel(unsafe=True)
def histogram(h: ts.Ptr[ts.i32], out: ts.Ptr[ts.f32], v: ts.Ptr[ts.i32], n: int):
    offs = ts.block_id(0) * 16 + ts.arange(0, 16)
    ok = offs < n
    bins = ts.load_ptr(v, offs, mask=ok, other=0)
    ts.atomic_add(h, bins, 1, mask=ok)
    ts.store_ptr(out, offs, ts.astype(bins, ts.f32) * 2.0, mask=ok)


def test_pointer_loads_stores_and_atomics():
    v = np.random.default_rng(19).integers(0, 6, 40).astype(np.int32)
    h, out = ts.zeros(6, ts.i32), ts.zeros(40, ts.f32)
    histogram.unsafe_launch(h, out, ts.tensor(v), 40, grid=(3,)).sync()
    assert h.numpy().tolist() == np.bincount(v, minlength=6).tolist()
    np.testing.assert_array_equal(out.numpy(), v.astype(np.float32) * 2)


@ts.kernel
def fib(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, n: int):
    a = ts.load_tile_like(x, z)
    b = a * 0.5
    k = n
    for i in range(n):
        a, b = b, a + b            # a swap: each new value reads the other's old one
        k = k                      # a value carried through unchanged
    for i in range(n):
        pass
    z.store(a + b + ts.astype(k, ts.f32))


@pytest.mark.parametrize("n", [0, 1, 5])
def test_loop_carried_swap_and_unchanged_values(n):
    x = np.random.default_rng(25).standard_normal(12).astype(np.float32)
    got = fib(poisoned(12, "f32").partition((8,)), ts.tensor(x), n=n).sync().unpartition().numpy()
    a, b = x.astype(np.float64), x * 0.5
    for _ in range(n):
        a, b = b, a + b
    close(got, a + b + n, "f32")


@ts.kernel
def shout(z: ts.Mut[ts.i32, ("B",)], B: ts.Const[int]):
    t = ts.arange(0, B) + ts.block_id(0) * 100
    ts.print("tile", t)
    z.store(t)


@pytest.mark.interpreter_only
def test_print_goes_through_device_print(capfd):
    got = shout(poisoned(4, "i32").partition((4,))).sync().unpartition().numpy()
    assert got.tolist() == [0, 1, 2, 3]
    assert "tile" in capfd.readouterr().out
    assert "tl.device_print('tile', " in shout.source(ts.spec(4, ts.i32, tile=4))
