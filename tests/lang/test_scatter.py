"""The safe scatter (`for j in z.scatter(rows)`): a ts.MutTiles output written at rows named by
an index tensor. Oracles are NumPy written here; the reference runs sanitized (every block's
writes recorded, so a race or an out-of-bounds write would raise)."""
import numpy as np
import pytest
from lang_helpers import INTERNAL_NAMES, assert_diagnostic, marker_line

import tilesafe as ts

HERE = __file__
POISON = -777.0


@ts.kernel(sanitize=True)
def put_rows(out: ts.MutTiles[ts.f32, ("R", "C")], rows: ts.Ref[ts.i32, ("T",)], src: ts.Ref[ts.f32, ("T", "D")],
             R: ts.Const[int], C: ts.Const[int], T: int, D: int):
    for j in out.scatter(rows):
        out.store(ts.load(src, j, shape=(R, C)) * 2.0, j)  # scatter-store


@ts.kernel(sanitize=True)
def put_heads(out: ts.MutTiles[ts.f32, ("R", 1, "C")], rows: ts.Ref[ts.i64, ("T",)],
              src: ts.Ref[ts.f32, ("T", "H", "D")], R: ts.Const[int], C: ts.Const[int], T: int, H: int, D: int):
    for j in out.scatter(rows):
        out.store(ts.load(src, j, shape=(R, 1, C)), j)


def scattered(rows: np.ndarray, src: np.ndarray, n: int) -> np.ndarray:
    """The oracle: row i of src to row rows[i] where that entry is in [0, n) and unique."""
    want = np.full((n,) + src.shape[1:], POISON, np.float32)
    values, counts = np.unique(rows, return_counts=True)
    once = set(values[counts == 1].tolist())
    for i, r in enumerate(rows.tolist()):
        if 0 <= r < n and r in once:
            want[r] = src[i]
    return want


def run(kernel, rows, src, n, tile, grid=None):
    out = ts.tensor(np.full((n,) + src.shape[1:], POISON, np.float32))
    p = out.partition(tile)
    args = (p, ts.tensor(rows), ts.tensor(src))
    (kernel(*args) if grid is None else kernel.launch(*args, grid=grid)).sync()
    return p.unpartition().numpy()


@pytest.mark.parametrize("n,t,d,tile", [(13, 6, 5, (4, 4)), (40, 17, 9, (8, 4)), (8, 8, 16, (2, 16))])
def test_scatter_writes_each_row_where_its_index_says(backend, n, t, d, tile):
    rng = np.random.default_rng(n + t)
    rows = rng.permutation(n)[:t].astype(np.int32)
    src = rng.standard_normal((t, d)).astype(np.float32)
    got = run(put_rows, rows, src, n, tile)
    np.testing.assert_array_equal(got, scattered(rows, 2.0 * src, n))


@pytest.mark.parametrize("grid", [(1,), (2,), (5,)])
def test_any_grid_writes_every_source_tile_once(backend, grid):
    rng = np.random.default_rng(7)
    rows = rng.permutation(30)[:19].astype(np.int32)
    src = rng.standard_normal((19, 6)).astype(np.float32)
    np.testing.assert_array_equal(run(put_rows, rows, src, 30, (4, 4), grid), scattered(rows, 2.0 * src, 30))


def test_bad_entries_write_nothing(backend):
    """Out of range, negative (a padded slot) and shared entries are dropped, the rest written."""
    rows = np.array([3, 3, 0, 13, -1, 9, 11, 0, 12, 2**31 - 1], np.int32)
    src = np.arange(10 * 5, dtype=np.float32).reshape(10, 5) + 1.0
    got = run(put_rows, rows, src, 13, (4, 4))
    want = np.full((13, 5), POISON, np.float32)
    for i, r in ((5, 9), (6, 11), (8, 12)):
        want[r] = 2.0 * src[i]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(4))
def test_random_indices_with_repeats_and_strays_match_the_oracle(backend, seed):
    """Random sizes, tiles and grids; indices drawn from a range wider than the output, so
    repeats, negatives and out-of-range entries mix with good ones."""
    rng = np.random.default_rng(100 + seed)
    n, t, d = (int(x) for x in rng.integers(1, 24, size=3))
    tile = (int(2 ** rng.integers(1, 4)), int(2 ** rng.integers(2, 5)))   # few tiles: the interpreter is slow
    rows = rng.integers(-2, n + 3, size=t).astype(np.int32)
    src = rng.standard_normal((t, d)).astype(np.float32)
    got = run(put_rows, rows, src, n, tile, grid=(int(rng.integers(1, 5)),))
    np.testing.assert_array_equal(got, scattered(rows, 2.0 * src, n))


def test_repeats_far_apart_in_a_long_index_are_dropped(backend):
    """More entries than the store compares at once: repeats in different chunks still drop."""
    rng = np.random.default_rng(11)
    rows = rng.permutation(400)[:300].astype(np.int32)
    rows[250], rows[260] = rows[3], rows[140]                # repeats across chunk boundaries
    src = rng.standard_normal((300, 3)).astype(np.float32)
    np.testing.assert_array_equal(run(put_rows, rows, src, 400, (16, 4), grid=(3,)), scattered(rows, 2.0 * src, 400))


def test_a_long_index_is_compared_in_wide_trips():
    """The Triton store compares a tile's rows with the whole index in trips: one narrow trip
    of 64 entries for a short index (a decode step's slots), 4096 (row, entry) pairs a trip
    for a long one (a prefill's: an 8-row tile takes 512 entries a trip, not 64)."""
    rows = ts.tensor(np.arange(300, dtype=np.int32))
    out = ts.tensor(np.zeros((400, 4), np.float32))
    src = put_rows.source(out.partition((8, 4)), rows, ts.tensor(np.zeros((300, 4), np.float32)))
    assert "if rows_n0 <= 64:" in src and "in range(0, rows_n0, 64):" in src
    assert "in range(0, rows_n0, 512):" in src


@pytest.mark.parametrize("t,tile_rows", [(64, 8), (65, 8), (513, 8), (65, 1)])
def test_first_and_last_entry_repeated_at_every_trip_boundary(backend, t, tile_rows):
    """Lengths at the Triton store's trip edges (8-row tiles: one narrow trip up to 64 entries,
    then trips of 512; 1-row tiles: one of 64, then trips of 1024): the first entry's row repeated by the
    last, which sits in the last (partial) trip, still drops both; everything else lands."""
    rng = np.random.default_rng(t)
    rows = rng.permutation(t + 50)[:t].astype(np.int32)
    rows[-1] = rows[0]
    src = rng.standard_normal((t, 4)).astype(np.float32)
    got = run(put_rows, rows, src, t + 50, (tile_rows, 4), grid=(2,))
    want = scattered(rows, 2.0 * src, t + 50)
    assert (want == POISON).all(axis=1).sum() == 52                   # the oracle drops the pair
    np.testing.assert_array_equal(got, want)


def test_rank3_output_one_head_per_tile(backend):
    """A KV-cache-shaped output (slots, heads, dim): tile (R, 1, C), i64 rows."""
    rng = np.random.default_rng(3)
    rows = np.array([5, 1, -1, 7, 2], np.int64)
    src = rng.standard_normal((5, 3, 6)).astype(np.float32)
    np.testing.assert_array_equal(run(put_heads, rows, src, 9, (2, 1, 4)), scattered(rows, src, 9))


def test_scatter_does_not_initialise_the_output():
    """Only the named rows are written, so a ts.empty output stays unreadable (S14)."""
    with ts.backend("reference"):
        out = ts.empty((8, 4))
        p = out.partition((4, 4))
        put_rows(p, ts.tensor(np.arange(8, dtype=np.int32)), ts.tensor(np.ones((8, 4), np.float32))).sync()
        with pytest.raises(ts.OwnershipError):
            p.unpartition().numpy()


# --- the host check ---------------------------------------------------------------------------
def test_host_check_accepts_distinct_rows_and_padding():
    ts.check_scatter_index(ts.tensor(np.array([4, -1, 0, 2, -1], np.int32)), 5)
    ts.check_scatter_index(np.zeros(0, np.int64), 0)


def test_host_check_refuses_a_duplicate_row():
    rows = ts.tensor(np.array([4, 1, 0, 1], np.int32))
    with pytest.raises(ts.LaunchError) as e:
        ts.check_scatter_index(rows, 8, "slots")  # dup-check
    assert e.value.message == "entries 1 and 3 of `slots` both name row 1"
    assert e.value.loc.line == marker_line(HERE, "dup-check") and "help:" in str(e.value)


def test_host_check_refuses_a_row_out_of_range():
    with pytest.raises(ts.LaunchError) as e:
        ts.check_scatter_index(np.array([0, 8, 2], np.int64), 8)  # range-check
    assert e.value.message == "entry 1 of `rows` is 8, outside the output's 8 rows"
    assert e.value.loc.line == marker_line(HERE, "range-check")


def test_host_check_refuses_floats_and_matrices():
    with pytest.raises(ts.LaunchError, match="must hold integers"):
        ts.check_scatter_index(np.zeros(3, np.float32), 8)
    with pytest.raises(ts.LaunchError, match="must be 1-D"):
        ts.check_scatter_index(np.zeros((2, 2), np.int32), 8)


# --- launch-time refusals ---------------------------------------------------------------------
@ts.kernel
def put_ints(out: ts.MutTiles[ts.i32, ("R", "C")], rows: ts.Ref[ts.i32, ("T",)], R: ts.Const[int], C: ts.Const[int],
             T: int):
    for j in out.scatter(rows):
        out.store(ts.full((R, C), 1, ts.i32), j)


def test_index_tensor_aliasing_the_output_is_refused():
    with ts.backend("reference"):
        cache = ts.tensor(np.arange(32, dtype=np.int32).reshape(8, 4) % 8)
        rows = cache[:, 0]                      # the index lives inside the output
        p = cache.partition((4, 4))
        with pytest.raises(ts.AliasError) as e:
            put_ints(p, rows)  # alias-launch
        assert "shares memory with argument `rows`" in e.value.message
        assert e.value.loc.line == marker_line(HERE, "alias-launch")
        assert np.array_equal(p.unpartition().numpy(), np.arange(32).reshape(8, 4) % 8)


# --- definition-time refusals -----------------------------------------------------------------
def define_scatter_of_a_mut():
    @ts.kernel
    def k(out: ts.Mut[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T",)], T: int):
        for j in out.scatter(rows):  # on-mut
            out.store(ts.zeros((4, 4), ts.f32), j)


def define_float_rows():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.f32, ("T",)], T: int):
        for j in out.scatter(rows):  # float-rows
            out.store(ts.zeros((4, 4), ts.f32), j)


def define_matrix_rows():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T", 2)], T: int):
        for j in out.scatter(rows):  # matrix-rows
            out.store(ts.zeros((4, 4), ts.f32), j)


def define_output_rows():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.MutTiles[ts.i32, (4,)]):
        for j in out.scatter(rows):  # output-rows
            out.store(ts.zeros((4, 4), ts.f32), j)


def define_read_back():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T",)], T: int):
        for j in out.scatter(rows):
            out.store(out.load(j) + 1.0, j)  # read-back


def define_second_walk():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T",)], T: int):
        for j in out.scatter(rows):
            out.store(ts.zeros((4, 4), ts.f32), j)
        for i in out.tiles():  # second-walk
            out.store(ts.zeros((4, 4), ts.f32), i)


def define_nested():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T",)], T: int):
        for r in range(2):
            for j in out.scatter(rows):  # nested
                out.store(ts.zeros((4, 4), ts.f32), j)


def define_foreign_index():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], other: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T",)],
          T: int):
        for j in out.scatter(rows):
            other.store(ts.zeros((4, 4), ts.f32), j)  # foreign


def define_wrong_shape():
    @ts.kernel
    def k(out: ts.MutTiles[ts.f32, (4, 4)], rows: ts.Ref[ts.i32, ("T",)], T: int):
        for j in out.scatter(rows):
            out.store(ts.zeros((4, 2), ts.f32), j)  # wrong-shape


@pytest.mark.parametrize("define,marker,fragment", [
    (define_scatter_of_a_mut, "on-mut", "`out.scatter(rows)` writes a ts.MutTiles output; `out` is ts.Mut"),
    (define_float_rows, "float-rows", "the rows of `out.scatter(rows)` must be a 1-D integer ts.Ref, got `rows` "
                                      "(ts.Ref, rank 1, f32)"),
    (define_matrix_rows, "matrix-rows", "must be a 1-D integer ts.Ref, got `rows` (ts.Ref, rank 2, i32)"),
    (define_output_rows, "output-rows", "must be a 1-D integer ts.Ref, got `rows` (ts.MutTiles, rank 1, i32)"),
    (define_read_back, "read-back", "`out` is written by `out.scatter(rows)` and cannot be read in the same kernel"),
    (define_second_walk, "second-walk", "`out` is already walked at line"),
    (define_nested, "nested", "`out.scatter(rows)` cannot be nested inside another loop"),
    (define_foreign_index, "foreign", "this index was minted by `out.scatter()` and cannot index `other`"),
    (define_wrong_shape, "wrong-shape", "the stored tile is f32[4,2], but `out`'s tile is (4, 4)"),
])
def test_misuse_is_a_kernel_error_at_its_line(define, marker, fragment):
    with pytest.raises(ts.KernelError) as e:
        define()
    assert_diagnostic(e.value, HERE, marker, fragment)
    assert not any(name in str(e.value) for name in INTERNAL_NAMES), str(e.value)


def test_the_bounds_report_counts_the_scatter_as_masked():
    """S11's report lists the scatter: its rows are always masked in the kernel (axis 0 comes
    from the index tensor), whatever the launch facts."""
    specs = (ts.spec((16, 8), ts.f32, tile=(4, 4)), ts.spec((8,), ts.i32), ts.spec((8, 8), ts.f32))
    report = str(put_rows.checks(*specs))
    assert f"line {marker_line(HERE, 'scatter-store')}: scatter out: kernel" in report, report
