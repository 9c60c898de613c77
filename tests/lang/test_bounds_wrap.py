"""S11 under 32-bit wrap: scalar integer arithmetic in a kernel wraps in its dtype (i32 here),
as Triton's does, while a tile index i addresses the elements [i*s, (i+1)*s) exactly. The
bounds proof may use a runtime scalar only through conditions the launch checks, including
that no sum or product on the way wrapped; a masked tile whose offsets could wrap in 32 bits
is also guarded on its index. Each case runs on both CPU backends against a NumPy oracle that
wraps the scalar arithmetic itself (the reference sanitizer raises on any maskless access
outside a tensor)."""
import numpy as np
import pytest
from lang_helpers import launch, poisoned

import tilesafe as ts

PAD = -7.0
X = np.arange(1, 65, dtype=np.float32)          # 4 tiles of 16, none of them equal to PAD


def _i32(v: int) -> int:
    """v wrapped to i32, as the kernel computes it."""
    return int(np.array(v, np.int64).astype(np.int32))


def _tile(x: np.ndarray, i: int, s: int, pad=PAD) -> np.ndarray:
    """Tile i of s elements of x, exactly: elements outside x read `pad`."""
    out = np.full(s, pad, x.dtype)
    for k in range(s):
        if 0 <= i * s + k < x.size:
            out[k] = x[i * s + k]
    return out


@ts.kernel(sanitize=True)
def add_then_divide(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    y.store(ts.load(x, ((s + 2 ** 30) // 2 ** 30,), shape=(16,), padding=PAD))


@ts.kernel(sanitize=True)
def multiply_then_divide(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    y.store(ts.load(x, ((s * 8) // 2 ** 30,), shape=(16,), padding=PAD))


@ts.kernel(sanitize=True)
def multiply_then_min(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    y.store(ts.load(x, (min(s * 4, 2),), shape=(16,), padding=PAD))


@ts.kernel(sanitize=True)
def add_then_min(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    y.store(ts.load(x, (ts.minimum(s + 1, 2),), shape=(16,), padding=PAD))


@ts.kernel(sanitize=True)
def times_four(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    y.store(ts.load(x, (s * 4,), shape=(16,), padding=PAD))


INDEX = {   # kernel -> the tile index it computes, wrapped as i32 arithmetic does
    add_then_divide: lambda s: _i32(s + 2 ** 30) // 2 ** 30,
    multiply_then_divide: lambda s: _i32(s * 8) // 2 ** 30,
    multiply_then_min: lambda s: min(_i32(s * 4), 2),
    add_then_min: lambda s: min(_i32(s + 1), 2),
    times_four: lambda s: _i32(s * 4),
}
S = [0, 1, -1, 2, 2 ** 28, 2 ** 28 + 2 ** 27, 2 ** 29 + 1, 2 ** 30, 2 ** 30 + 1, 2 ** 31 - 1, -2 ** 31, -2 ** 30]
SPECS = (ts.spec((16,), tile=(16,)), ts.spec((64,)))


def _run(kernel, s) -> np.ndarray:
    y, _ = poisoned((16,), "f32")
    return launch(kernel, y, (16,), ts.tensor(X), s=s)


@pytest.mark.parametrize("s", S)
@pytest.mark.parametrize("kernel", list(INDEX), ids=lambda k: k.name)
def test_wrapped_index_reads_the_tile_it_names_or_padding(backend, kernel, s):
    """Old bug: (s + 2**30) // 2**30 at s = 2**30 is 2 in exact arithmetic but -2 in i32; the
    proof dropped the mask, the sanitizer reported elements [-32, -16), and the Triton
    interpreter read memory before the tensor."""
    np.testing.assert_array_equal(_run(kernel, s), _tile(X, INDEX[kernel](s), 16))


EXACT = {   # kernel -> (its sums and products in exact arithmetic, its index if none wraps)
    add_then_divide: lambda s: ([s + 2 ** 30], (s + 2 ** 30) // 2 ** 30),
    multiply_then_divide: lambda s: ([s * 8], (s * 8) // 2 ** 30),
    multiply_then_min: lambda s: ([s * 4], min(s * 4, 2)),
    add_then_min: lambda s: ([s + 1], min(s + 1, 2)),
    times_four: lambda s: ([s * 4], s * 4),
}


@pytest.mark.parametrize("s", S)
@pytest.mark.parametrize("kernel", list(INDEX), ids=lambda k: k.name)
def test_a_proof_holds_exactly_when_nothing_wraps(backend, kernel, s):
    """The report is computed on the IR, the same on every backend: an access is proven by
    the launch when its index is in bounds and no sum or product on the way wrapped."""
    report = kernel.checks(*SPECS, s=s)
    steps, index = EXACT[kernel](s)
    no_wrap = all(-2 ** 31 <= v < 2 ** 31 for v in steps)
    proven = no_wrap and 0 <= index <= 3
    assert (report.launch, report.kernel) == ((2, 0) if proven else (1, 1)), (s, str(report))


def test_old_unsound_proofs_are_now_masked():
    # each of these was "proven by launch facts" before, although its i32 index is negative
    for kernel, s in [(add_then_divide, 2 ** 30), (multiply_then_divide, 2 ** 28),
                      (multiply_then_divide, 2 ** 28 + 2 ** 27), (multiply_then_min, 2 ** 31 - 1),
                      (multiply_then_min, 2 ** 29 + 1), (add_then_min, 2 ** 31 - 1)]:
        assert INDEX[kernel](s) < 0
        report = kernel.checks(*SPECS, s=s)
        assert (report.launch, report.kernel) == (1, 1), (kernel.name, s, str(report))


# --- item 2: a tile index whose element offset exceeds 32 bits --------------------------------
@ts.kernel(sanitize=True)
def tile_at(y: ts.Mut[ts.f32, (64,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    y.store(ts.load(x, (s,), shape=(64,), padding=PAD))


@pytest.mark.parametrize("s", [0, 2, 3, 2 ** 26 + 1, 2 ** 26 + 2, 2 ** 25 + 1, -(2 ** 26) + 1, 2 ** 31 - 1, -2 ** 31,
                               2 ** 33 + 1, -(2 ** 33) + 1])
def test_tile_index_past_32_bit_offsets_reads_padding(backend, s):
    """Old bug: tile 2**26 + 1 of 64 elements starts at 2**32 + 64, which wraps to 64 in 32
    bits: the Triton backend loaded tile 1 where the reference read padding. (2**33 + 1 is an
    i64 scalar: its product would wrap in 64 bits too.)"""
    xt = np.arange(1, 201, dtype=np.float32)    # 3 tiles and a ragged fourth
    y, _ = poisoned((64,), "f32")
    got = launch(tile_at, y, (64,), ts.tensor(xt), s=s)
    np.testing.assert_array_equal(got, _tile(xt, s, 64))


def test_a_broadcast_axis_past_32_bits_takes_64_bit_offsets(backend):
    """A stride-0 axis spans no bytes, but its coordinates count up to its extent: 2**31 + 100
    needs 64-bit offsets (old: 32-bit, so tile 2**25 + 1 of it wrapped negative and read
    padding on the Triton backend where the reference read the broadcast value)."""
    import torch
    x = ts.from_torch(torch.full((1,), 3.0).expand(2 ** 31 + 100))
    y, _ = poisoned((64,), "f32")
    got = launch(tile_at, y, (64,), x, s=2 ** 25 + 1)
    np.testing.assert_array_equal(got, np.where(np.arange(64) < 36, 3.0, PAD).astype(np.float32))
    head = "# offsets: {}-bit"
    assert head.format(64) in tile_at.source(ts.spec((64,), tile=(64,)), ts.spec((2 ** 31 + 100,), strides=(0,)), s=1)
    # an index past 32 bits alone keeps 32-bit offsets: its access guards the index instead
    assert head.format(32) in tile_at.source(ts.spec((64,), tile=(64,)), ts.spec((200,)), s=2 ** 26 + 1)


@ts.kernel(sanitize=True)
def rows_and_validity(y: ts.Mut[ts.f32, (16, 16)], v: ts.Mut[ts.i32, (16, 16)], x: ts.Ref[ts.f32, ("M", "N")],
                      M: int, N: int, s: int):
    t = ts.load(x, (s, ts.block_id(1)), shape=(16, 16), padding=PAD)     # (16, 16)
    y.store(t)
    v.store(ts.valid(t).astype(ts.i32))


@pytest.mark.parametrize("s", [0, 2, 2 ** 27 + 1, 2 ** 28 + 1, -(2 ** 28) + 2])
def test_two_axis_tile_and_its_valid_mask_under_wrap(backend, s):
    """Row tile s of 16 (2**27 + 1 starts at 2**31 + 16: wrapped, that is row tile 1 or, as
    -2**31 + 16, a negative one)."""
    x = np.arange(1, 40 * 32 + 1, dtype=np.float32).reshape(40, 32)
    y, _ = poisoned((16, 32), "f32")
    v, _ = poisoned((16, 32), "i32")
    py, pv = y.partition((16, 16)), v.partition((16, 16))
    rows_and_validity(py, pv, ts.tensor(x), s=s).sync()
    got, valid = py.unpartition().numpy(), pv.unpartition().numpy()
    want = np.full((16, 32), PAD, np.float32)
    for r in range(16):
        if 0 <= s * 16 + r < 40:
            want[r] = x[s * 16 + r]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(valid, (want != PAD).astype(np.int32))


@ts.kernel(sanitize=True)
def gather_rows(y: ts.Mut[ts.f32, (4, 16)], x: ts.Ref[ts.f32, ("M", "N")], ids: ts.Ref[ts.i32, ("R",)],
                M: int, N: int, R: int, s: int):
    rows = ts.load(ids, (0,), shape=(4,))                                         # (4,)
    y.store(ts.gather(x, rows, axis=0, shape=(4, 16), index=(0, s), padding=PAD))


@pytest.mark.parametrize("s", [1, 2 ** 27 + 1, -(2 ** 28) + 1])
def test_gather_column_tile_under_wrap(backend, s):
    x = np.arange(1, 6 * 40 + 1, dtype=np.float32).reshape(6, 40)
    ids = np.array([5, 0, 9, 2], np.int32)                                        # 9: out of range
    y, _ = poisoned((4, 16), "f32")
    got = launch(gather_rows, y, (4, 16), ts.tensor(x), ts.tensor(ids), s=s)
    want = np.full((4, 16), PAD, np.float32)
    for k, r in enumerate(ids):
        for c in range(16):
            if r < 6 and 0 <= s * 16 + c < 40:
                want[k, c] = x[r, s * 16 + c]
    np.testing.assert_array_equal(got, want)


@ts.kernel
def window_fill(z: ts.MutTiles[ts.f32, (64,)], start: int, count: int):
    for idx in z.tiles(within=[(start, count)]):
        z.store(ts.full((64,), 5.0, ts.f32), idx)


@pytest.mark.parametrize("start, count, written", [(1, 1, [1]), (2 ** 26 + 1, 1, []), (-(2 ** 26), 1, []),
                                                   (2 ** 31 - 1, 2, []), (2 ** 26 - 1, 3, [])])
def test_window_far_past_the_end_writes_nothing(backend, start, count, written):
    """Old bug: the window's tile 2**26 + 1 starts at 2**32 + 64 (64 once wrapped), so the
    Triton backend overwrote tile 1; start + 1 = 2**31 wraps to -2**31 in i32, whose offset
    wraps to 0."""
    z, poison = poisoned((150,), "f32", 999.0)
    got = launch(window_fill, z, (64,), start, count)
    want = poison.copy()
    for t in written:
        want[t * 64:(t + 1) * 64] = 5.0
    np.testing.assert_array_equal(got, want)


# --- the proof keeps what is sound ------------------------------------------------------------
@ts.kernel(sanitize=True)
def window_of_tiles(y: ts.Mut[ts.f32, (1, 1)], x: ts.Ref[ts.f32, ("M", "K")], BK: ts.Const[int], M: int, K: int,
                    first: int):
    acc = ts.zeros((1, BK), ts.f32)
    for k in range(first, ts.num_tiles(x.partition((1, BK)), 1)):
        acc = acc + ts.load(x, (ts.block_id(0), k), shape=(1, BK))
    y.store(ts.sum(acc, axis=1, keepdims=True))


@pytest.mark.parametrize("first, proven", [(0, True), (3, True), (-1, False), (2 ** 31 - 1, True)])
def test_loop_from_a_runtime_start_is_proven_when_it_cannot_go_negative(backend, first, proven):
    report = window_of_tiles.checks(ts.spec((3, 1), tile=(1, 1)), ts.spec((3, 64)), BK=16, first=first)
    assert (report.kernel == 0) == proven, str(report)
    x = np.random.default_rng(7).standard_normal((3, 64)).astype(np.float32)
    out = window_of_tiles(ts.empty((3, 1)).partition((1, 1)), ts.tensor(x), BK=16, first=first).sync()
    want = x[:, max(first, 0) * 16:].sum(1) if first < 4 else np.zeros(3)
    np.testing.assert_allclose(out.unpartition().numpy()[:, 0], want, rtol=1e-5, atol=1e-5)


def test_a_new_scalar_reuses_the_code_its_launch_proves():
    """Only the launch check is added per launch: an s the launch proves reuses the maskless
    code (no recompile, whatever its value); a wrapping s takes the masked code."""
    @ts.kernel(sanitize=True)
    def clamped(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
        y.store(ts.load(x, (min(s * 4, 2),), shape=(16,), padding=PAD))

    with ts.backend("reference"):
        _run(clamped, 0)
        _run(clamped, 1)
        assert len(clamped.specializer.code) == 1
        np.testing.assert_array_equal(_run(clamped, 2 ** 31 - 1), _tile(X, -4, 16))
        assert len(clamped.specializer.code) == 2


@ts.kernel(sanitize=True)
def strided_from(y: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    acc = ts.zeros((16,), ts.f32)
    for k in range(s, s + 2, 4):                      # one iteration: k = s
        acc = acc + ts.load(x, (k - s,), shape=(16,), padding=PAD)
    y.store(acc)


@pytest.mark.parametrize("s, proven", [(5, True), (2 ** 31 - 6, True), (2 ** 31 - 4, False)])
def test_a_loop_step_that_could_wrap_proves_nothing(backend, s, proven):
    """k < s + 2, so k - s is 0 or 1, unless k + 4 wraps past i32's top: on the GPU the loop
    would then go on with a negative k. Near the top the load keeps its mask."""
    report = strided_from.checks(*SPECS, s=s)
    assert (report.kernel == 0) == proven, str(report)
    np.testing.assert_array_equal(_run(strided_from, s), X[:16])


@ts.kernel(sanitize=True)
def half_block_tile(z: ts.MutTiles[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    t = ts.load(x, (ts.block_id(0) // 2,), shape=(16,), padding=PAD)   # every block loads
    for idx in z.tiles():
        z.store(t, idx)


def test_an_index_from_a_grid_of_any_size_keeps_its_mask(backend):
    """A persistent kernel launched without grid= runs on any number of blocks, so
    block_id(0) // 2 has no upper bound. Old bug: the bound inf // 2 evaluated to NaN, which
    a launch took for true, and block 2's tile 1 of a 16-element x was loaded unmasked
    (the reference sanitizer reported it)."""
    report = half_block_tile.checks(ts.spec((16,), tile=(16,)), ts.spec((16,)))
    assert (report.launch, report.kernel) == (1, 1), str(report)
    x = np.arange(1, 17, dtype=np.float32)
    z, _ = poisoned((16,), "f32")
    np.testing.assert_array_equal(launch(half_block_tile, z, (16,), ts.tensor(x)), x)


@ts.kernel(sanitize=True)
def ragged_tail(y: ts.Mut[ts.f32, (1, 16)], x: ts.Ref[ts.f32, ("M", "N")], lens: ts.Ref[ts.i32, (1,)],
                M: int, N: int):
    """Row tiles [0, ceil(min(lens[0], N) / 16)), as decode attention walks its keys: the
    length from memory has only its i32 range below, which is enough to rule out a wrap."""
    stop = min(ts.scalar(ts.load(lens, (0,), shape=(1,))), N)
    acc = ts.zeros((1, 16), ts.f32)
    for j in range((stop + 15) // 16):
        acc = acc + ts.load(x, (ts.block_id(0), j), shape=(1, 16))
    y.store(acc)


@pytest.mark.parametrize("n, length", [(64, 40), (70, 70), (70, 1000), (64, -5)])
def test_a_bound_from_memory_keeps_its_proof_and_needs_no_guard(backend, n, length):
    specs = ts.spec((3, 16), tile=(1, 16)), ts.spec((3, n)), ts.spec((1,), ts.i32)
    report = ragged_tail.checks(*specs)
    assert (report.static, report.launch, report.kernel) == ((1, 2, 0) if n % 16 == 0 else (1, 1, 1)), str(report)
    assert "_ok = " not in ragged_tail.source(*specs)             # masked at most, never guarded
    x = np.random.default_rng(8).standard_normal((3, n)).astype(np.float32)
    y, _ = poisoned((3, 16), "f32")
    got = launch(ragged_tail, y, (1, 16), ts.tensor(x), ts.tensor(np.array([length], np.int32)))
    tiles = -(-min(max(length, 0), n) // 16) if length > 0 else 0
    padded = np.pad(x, ((0, 0), (0, -n % 16)))[:, :tiles * 16]
    np.testing.assert_allclose(got, padded.reshape(3, tiles, 16).sum(1) if tiles else np.zeros((3, 16)),
                               rtol=1e-5, atol=1e-5)
