"""Property tests over shapes, tile sizes and dtypes: tiled kernels agree with NumPy whatever
the raggedness, and the S11 report accounts for every access."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lang_helpers import NOT_ON_TRITON_INTERPRETER, NP, launch, rand

import tilesafe as ts

# A small, derandomized profile so the suite stays fast and reproducible; registered, not
# loaded, so other tests keep theirs.
settings.register_profile("tilesafe-lang", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
LANG = settings.get_profile("tilesafe-lang")

extents = st.integers(1, 70)
tiles = st.sampled_from([1, 2, 4, 8, 16, 32, 64])
dtypes = st.sampled_from(["f32", "f16", "bf16", "i32", "i8"])


@ts.kernel
def add1(z: ts.Mut["T", ("B0",)], x: ts.Ref["T", ("N0",)], y: ts.Ref["T", ("N0",)], B0: ts.Const[int],
         T: ts.Const[ts.DType], N0: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


@ts.kernel
def add2(z: ts.Mut["T", ("B0", "B1")], x: ts.Ref["T", ("N0", "N1")], y: ts.Ref["T", ("N0", "N1")],
         B0: ts.Const[int], B1: ts.Const[int], T: ts.Const[ts.DType], N0: int, N1: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


@ts.kernel
def add3(z: ts.Mut["T", ("B0", "B1", "B2")], x: ts.Ref["T", ("N0", "N1", "N2")], y: ts.Ref["T", ("N0", "N1", "N2")],
         B0: ts.Const[int], B1: ts.Const[int], B2: ts.Const[int], T: ts.Const[ts.DType], N0: int, N1: int, N2: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))


ADD = {1: add1, 2: add2, 3: add3}


@st.composite
def shapes_and_tiles(draw, max_rank=3, max_elems=3000):
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(extents) for _ in range(rank))
    while np.prod(shape) > max_elems:          # halve the largest axis (it is > 1 here)
        a = int(np.argmax(shape))
        shape = shape[:a] + (shape[a] // 2,) + shape[a + 1:]
    tile = tuple(draw(tiles) for _ in range(rank))
    return shape, tile


def _fit_grid(backend, shape, tile, limit=16):
    """Triton's interpreter runs a few ms per program: keep its grids tiny by growing the tile."""
    if backend == "reference":
        return tile
    tile = list(tile)
    while np.prod([-(-n // t) for n, t in zip(shape, tile)]) > limit:
        a = max(range(len(tile)), key=lambda i: -(-shape[i] // tile[i]))
        tile[a] *= 2
    return tuple(tile)


def _skip_unsupported(backend, dtype):
    return backend != "reference" and dtype in NOT_ON_TRITON_INTERPRETER


@LANG
@given(st_=shapes_and_tiles(), dtype=dtypes, seed=st.integers(0, 2**32 - 1))
def test_elementwise_add_matches_numpy(backend, st_, dtype, seed):
    shape, tile = st_
    if _skip_unsupported(backend, dtype):
        return
    tile = _fit_grid(backend, shape, tile)
    rng = np.random.default_rng(seed)
    x, y = rand(rng, shape, dtype, -100, 100), rand(rng, shape, dtype, -100, 100)
    got = launch(ADD[len(shape)], ts.empty(shape, getattr(ts, dtype)), tile, ts.tensor(x), ts.tensor(y),
                 T=getattr(ts, dtype))
    want = (x.astype(np.float64) + y.astype(np.float64)).astype(NP[dtype])   # one correctly rounded op
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64))


@ts.kernel
def row_sum_and_max(z: ts.Mut[ts.f32, ("BM", 2)], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int],
                    BK: ts.Const[int], M: int, N: int):
    px = x.partition((BM, BK))
    s = ts.zeros((BM,), ts.f32)
    m = ts.full((BM,), -float("inf"), ts.f32)
    for k in range(ts.num_tiles(px, 1)):
        s = s + ts.sum(px.load((ts.block_id(0), k)), axis=1)
        m = ts.maximum(m, ts.max(px.load((ts.block_id(0), k), padding=-float("inf")), axis=1))
    z.store(ts.join(s, m))


@LANG
@given(m=extents, n=extents, bm=tiles, bk=tiles, seed=st.integers(0, 2**32 - 1))
def test_tiled_reduction_matches_numpy(backend, m, n, bm, bk, seed):
    x = rand(np.random.default_rng(seed), (m, n), "f32")
    bm = _fit_grid(backend, (m,), (bm,), limit=8)[0]
    bk = bk if backend == "reference" else max(bk, 16)     # at most 5 loop trips per program
    got = launch(row_sum_and_max, ts.empty((m, 2)), (bm, 2), ts.tensor(x), BK=bk)
    np.testing.assert_allclose(got[:, 0], x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5 * n)
    assert np.array_equal(got[:, 1], x.max(1))


@ts.kernel
def tiled_copy(z: ts.MutTiles["T", ("B0", "B1")], x: ts.Ref["T", ("N0", "N1")], G: ts.Const[int],
               B0: ts.Const[int], B1: ts.Const[int], T: ts.Const[ts.DType], N0: int, N1: int):
    for idx in z.tiles(group=G):
        z.store(ts.load(x, idx, shape=z.tile_shape), idx)


@LANG
@given(st_=shapes_and_tiles(max_rank=2).filter(lambda s: len(s[0]) == 2), dtype=dtypes,
       group=st.integers(1, 5), grid=st.one_of(st.none(), st.integers(1, 9)), seed=st.integers(0, 2**32 - 1))
def test_persistent_tiled_copy_matches_numpy(backend, st_, dtype, group, grid, seed):
    shape, tile = st_
    if _skip_unsupported(backend, dtype):
        return
    tile = _fit_grid(backend, shape, tile, limit=40)          # persistent: at most 9 programs anyway
    x = rand(np.random.default_rng(seed), shape, dtype, -100, 100)
    got = launch(tiled_copy, ts.empty(shape, getattr(ts, dtype)), tile, ts.tensor(x), G=group,
                 T=getattr(ts, dtype), grid=grid)
    assert np.array_equal(got.astype(np.float64), x.astype(np.float64))


@settings(LANG)
@given(st_=shapes_and_tiles(max_elems=10**9))
def test_checks_report_accounts_for_every_access(st_):
    shape, tile = st_
    k = ADD[len(shape)]
    report = k.checks(ts.spec(shape, tile=tile), ts.spec(shape), ts.spec(shape))
    assert report.static + report.launch + report.kernel == len(report.accesses) == 3   # x, y, z
    divides = all(n % t == 0 for n, t in zip(shape, tile))
    assert report.kernel == (0 if divides else 3)
    assert report.launch == (3 if divides else 0)
    assert report.static == 0


@ts.kernel(sanitize=True)
def access_patterns(z: ts.Mut[ts.f32, ("B0", "B1")], x: ts.Ref[ts.f32, ("M", "N")], r: int, BK: ts.Const[int],
                    B0: ts.Const[int], B1: ts.Const[int], M: int, N: int):
    i, j = ts.block_id(0), ts.block_id(1)
    px = x.partition((B0, BK))
    acc = ts.load_tile_like(x, z)                                          # this block's tile
    for k in range(ts.num_tiles(px, 1)):                                   # a loop to num_tiles
        acc = acc + ts.sum(px.load((i, k)), axis=1, keepdims=True)
    acc = acc + ts.load(x, (r, j), shape=(B0, B1))                         # a runtime index
    acc = acc + ts.load(x, (0, 0), shape=(B0, B1))                         # a constant index
    z.store(acc)


@LANG
@given(m=extents, n=extents, b0=tiles, b1=tiles, bk=tiles, r=st.integers(0, 80), seed=st.integers(0, 2**32 - 1))
def test_bounds_proofs_hold_under_the_sanitizer(backend, m, n, b0, b1, bk, r, seed):
    # On the reference backend the sanitizer checks that every access the launch runs without a
    # mask stays inside its tensor (a wrong proof is a SanitizerError); everywhere the values
    # must match padding semantics.
    b0, b1 = _fit_grid(backend, (m, n), (b0, b1))
    bk = bk if backend == "reference" else max(bk, 16)
    r = r % (-(-m // b0) + 1)                              # a tile index, sometimes past the end
    x = rand(np.random.default_rng(seed), (m, n), "f32")
    got = launch(access_patterns, ts.empty((m, n)), (b0, b1), ts.tensor(x), r, BK=bk)
    pad = np.zeros((max(m, (r + 1) * b0) + b0, n + b1))
    pad[:m, :n] = x
    a, b = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    want = (x + x.astype(np.float64).sum(1, keepdims=True) + pad[r * b0 + a % b0, (b // b1) * b1 + b % b1]
            + pad[a % b0, b % b1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@ts.kernel(sanitize=True)
def persistent_block_indexed(z: ts.MutTiles[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
    t = ts.load(x, (ts.block_id(0),), shape=(16,))            # one tile per persistent program
    for idx in z.tiles():
        z.store(t, idx)


def test_block_indexed_load_in_a_persistent_kernel_keeps_its_mask(backend):
    # The grid of a persistent kernel launched without grid= is the backend's choice, so a load
    # indexed by block_id cannot be proven from "grid = 1" (a past bug: maskless, out of bounds).
    report = persistent_block_indexed.checks(ts.spec(64, tile=16), ts.spec(16))
    assert {what: s for _, what, s in report.accesses}["load x"] == "kernel"
    report = persistent_block_indexed.checks(ts.spec(64, tile=16), ts.spec(16), grid=(1,))
    assert {what: s for _, what, s in report.accesses}["load x"] == "launch"
    x = rand(np.random.default_rng(140), 16, "f32")
    got = launch(persistent_block_indexed, ts.empty(64), (16,), ts.tensor(x), grid=2)
    tiles_ = got.reshape(4, 16)             # with grid 2, block 0 walks tiles 0 and 2, block 1 tiles 1 and 3
    assert np.array_equal(tiles_[[0, 2]], np.stack([x, x])) and (tiles_[[1, 3]] == 0).all()   # block 1: padding
