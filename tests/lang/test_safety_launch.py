"""Negative (and matching positive) tests for the rules checked when a kernel is launched:
S4 (unsafe kernels), S5 (grids), S6 (arguments), S11 (deny_kernel_checks). A refused launch
writes nothing and leaves its arguments usable."""
import numpy as np
import pytest
from lang_helpers import assert_diagnostic, launch, poisoned, rand

import tilesafe as ts

HERE = __file__


@ts.kernel
def copy1d(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)


@ts.kernel
def two_outputs(z: ts.Mut[ts.f32, ("B",)], w: ts.Mut[ts.f32, ("C",)], x: ts.Ref[ts.f32, ("N",)],
                B: ts.Const[int], C: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))
    w.store(ts.full((C,), 2.0, ts.f32))


def _launch_error_text(e):
    text = str(e)
    assert text.startswith("error: ") and text.count("error:") == 1
    for name in ("tilesafe/", "Traceback", "Builder"):
        assert name not in text
    return text


# --- S4 ---------------------------------------------------------------------------------------
@ts.kernel(unsafe=True)
def scatter(out: ts.Ptr[ts.f32], x: ts.Ref[ts.f32, ("N",)], idx: ts.Ref[ts.i32, ("N",)], N: int):
    v = ts.load(x, (ts.block_id(0),), shape=(16,))
    offs = ts.load(idx, (ts.block_id(0),), shape=(16,))
    ts.store_ptr(out, offs, v, mask=ts.valid(v))


def test_calling_an_unsafe_kernel_plainly_is_refused():
    out = ts.zeros(40)
    x = ts.tensor(rand(np.random.default_rng(100), 40, "f32"))
    idx = ts.tensor(np.arange(40, dtype=np.int32))
    with pytest.raises(ts.LaunchError) as ei:
        scatter(out, x, idx)
    assert "unsafe kernel and cannot be launched by a plain call" in ei.value.message
    assert "unsafe_launch" in _launch_error_text(ei.value)
    with pytest.raises(ts.LaunchError, match="unsafe kernel"):
        scatter.launch(out, x, idx, grid=(3,))
    assert (out.numpy() == 0).all()


def test_unsafe_launch_runs_and_safe_kernels_refuse_it(backend):
    rng = np.random.default_rng(101)
    x = rand(rng, 40, "f32")
    perm = rng.permutation(40).astype(np.int32)
    out = ts.zeros(40)
    scatter.unsafe_launch(out, ts.tensor(x), ts.tensor(perm), grid=(3,)).sync()
    want = np.zeros(40, np.float32)
    want[perm] = x
    assert np.array_equal(out.numpy(), want)
    with pytest.raises(ts.LaunchError, match="is a safe kernel"):
        copy1d.unsafe_launch(ts.empty(16).partition((16,)), ts.tensor(x[:16]))


# --- S5: grids -----------------------------------------------------------------------------
def test_partitions_that_disagree_on_the_grid():
    x = ts.tensor(rand(np.random.default_rng(102), 100, "f32"))
    z, w = ts.empty(100), ts.empty(100)
    pz, pw = z.partition((32,)), w.partition((16,))
    with pytest.raises(ts.LaunchError) as ei:
        two_outputs(pz, pw, x)
    assert "the partitions disagree on the grid: `z` has (4,), `w` has (7,)" in ei.value.message
    _launch_error_text(ei.value)
    pw2 = pw.unpartition().partition((32,))       # agreeing partitions are fine
    two_outputs(pz, pw2, x).sync()
    assert (pw2.unpartition().numpy() == 2.0).all()


def test_explicit_grid_must_match_the_partitions():
    x = ts.tensor(rand(np.random.default_rng(103), 100, "f32"))
    p = ts.empty(100).partition((32,))
    for bad in [(3,), (5,), (4, 1)]:
        with pytest.raises(ts.LaunchError, match=r"does not match the grid \(4,\)"):
            copy1d.launch(p, x, grid=bad)
    copy1d.launch(p, x, grid=(4,)).sync()
    copy1d.launch(p, x, grid=4).sync()


def test_partition_prefix_with_a_smaller_grid_writes_only_leading_tiles(backend):
    x = rand(np.random.default_rng(104), 100, "f32")
    z, poison = poisoned(100, "f32", 999.0)
    p = z.partition_prefix((32,))
    copy1d.launch(p, ts.tensor(x), grid=(2,)).sync()
    got = p.unpartition().numpy()
    assert np.array_equal(got[:64], x[:64] + 1) and np.array_equal(got[64:], poison[64:])
    with pytest.raises(ts.LaunchError, match="does not match"):
        copy1d.launch(z.partition_prefix((32,)), ts.tensor(x), grid=(5,))


def test_partition_prefix_of_an_empty_tensor_initialises_only_the_prefix():
    x = rand(np.random.default_rng(105), 100, "f32")
    z = ts.empty(100)
    p = z.partition_prefix((32,))
    copy1d.launch(p, ts.tensor(x), grid=(2,)).sync()
    z = p.unpartition()
    assert np.array_equal(z[:64].numpy(), x[:64] + 1)
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        z.numpy()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        z[60:70].numpy()


# --- S6: arguments match the signature -------------------------------------------------------------
@ts.kernel
def typed(z: ts.Mut[ts.f32, (16, 16)], x: ts.Ref[ts.f32, (4, -1)], y: ts.Ref[ts.f32, ("N",)],
          w: ts.Ref[ts.f32, ("N",)], N: int):
    yw = ts.load(y, (0,), shape=(16,)) * ts.load(w, (0,), shape=(16,))
    s = ts.sum(ts.load(x, (0, 0), shape=(4, 16))) + ts.sum(yw)
    z.store(ts.zeros((16, 16), ts.f32) + s)


def _typed_args(**over):
    rng = np.random.default_rng(106)
    args = dict(z=ts.empty((16, 16)).partition((16, 16)), x=ts.tensor(rand(rng, (4, 9), "f32")),
                y=ts.tensor(rand(rng, 10, "f32")), w=ts.tensor(rand(rng, 10, "f32")))
    args.update(over)
    return args


@pytest.mark.parametrize("case,fragment", [
    ("dtype", "argument `x` of `typed` has dtype f16, but the kernel declares f32"),
    ("rank", "argument `x` of `typed` has rank 1"),
    ("static_dim", "axis 0 must be 4"),
    ("named_dim", "`N` is 10 from one argument but 11 from dimension 0 of `w`"),
    ("passed_dim", "`N` = 7 was passed, but dimension 0 of `y` is 10"),
    ("plain_tensor", "is a plain tensor, but an output (ts.Mut) needs a partition"),
    ("partition_as_ref", "is a partition, but a ts.Ref takes the tensor itself"),
    ("tile", "the kernel's tile is (16, 16)"),
    ("not_a_tensor", "must be a tilesafe tensor"),
    ("missing", "missing the tensor argument `w`"),
    ("scalar_type", "`N` of `typed` must be int, got float 10.0"),
])
def test_arguments_that_do_not_match_the_signature(case, fragment):
    rng = np.random.default_rng(107)
    over, kw = {}, {}
    if case == "dtype":
        over["x"] = ts.tensor(rand(rng, (4, 9), "f16"))
    elif case == "rank":
        over["x"] = ts.tensor(rand(rng, 36, "f32"))
    elif case == "static_dim":
        over["x"] = ts.tensor(rand(rng, (5, 9), "f32"))
    elif case == "named_dim":
        over["w"] = ts.tensor(rand(rng, 11, "f32"))
    elif case == "passed_dim":
        kw["N"] = 7
    elif case == "plain_tensor":
        over["z"] = ts.empty((16, 16))
    elif case == "partition_as_ref":
        over["y"] = ts.tensor(rand(rng, 10, "f32")).partition((16,))
    elif case == "tile":
        over["z"] = ts.empty((16, 16)).partition((8, 16))
    elif case == "not_a_tensor":
        over["y"] = rand(rng, 10, "f32")
    elif case == "scalar_type":
        kw["N"] = 10.0
    args = _typed_args(**over)
    if case == "missing":
        del args["w"]
    with pytest.raises(ts.LaunchError) as ei:
        typed(**args, **kw)
    assert fragment in ei.value.message
    _launch_error_text(ei.value)


def test_a_passed_const_must_agree_with_the_partition():
    with pytest.raises(ts.LaunchError) as ei:
        copy1d(ts.empty(64).partition((32,)), ts.tensor(np.ones(64, np.float32)), B=64)
    assert "`B` = 64 was passed, but the tile of `z` (axis 0) is 32" in ei.value.message


def test_matching_arguments_are_accepted():
    for kw in ({}, {"N": 10}):
        args = _typed_args()
        typed(**args, **kw).sync()
        x, y, w = args["x"].numpy(), args["y"].numpy(), args["w"].numpy()
        want = x.astype(np.float64).sum() + (y.astype(np.float64) * w).sum()
        np.testing.assert_allclose(args["z"].unpartition().numpy(), np.full((16, 16), want), rtol=1e-5)


@ts.kernel(preconditions=["dim(x, 0) % 64 == 0", "n > 0"])
def needs_multiple(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], n: int, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * ts.astype(n, ts.f32))


def test_precondition_failure_is_refused_and_writes_nothing():
    x = rand(np.random.default_rng(108), 100, "f32")
    z, poison = poisoned(100, "f32", 999.0)
    p = z.partition((32,))
    with pytest.raises(ts.LaunchError) as ei:
        needs_multiple(p, ts.tensor(x), 2)
    assert "precondition `dim(x, 0) % 64 == 0` of `needs_multiple` does not hold" in ei.value.message
    assert "dim(x, 0) = 100" in ei.value.message
    with pytest.raises(ts.LaunchError, match="precondition `n > 0`"):
        needs_multiple(ts.empty(128).partition((32,)), ts.tensor(rand(np.random.default_rng(1), 128, "f32")), 0)
    assert np.array_equal(p.unpartition().numpy(), poison)


# --- S11: deny_kernel_checks ------------------------------------------------------------------------
@ts.kernel(deny_kernel_checks=True)
def strict_copy(z: ts.Mut[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int],
                BN: ts.Const[int], M: int, N: int):
    t = ts.load_tile_like(x, z)  # E:deny-load
    z.store(t * 2.0)


@pytest.mark.parametrize("shape", [(30, 64), (32, 60), (1, 1)])
def test_deny_kernel_checks_refuses_ragged_sizes(shape):
    x = rand(np.random.default_rng(109), shape, "f32")
    z, poison = poisoned(shape, "f32", 999.0)
    p = z.partition((16, 32))
    with pytest.raises(ts.KernelError) as ei:
        strict_copy(p, ts.tensor(x))
    axis = 0 if shape[0] % 16 else 1
    assert_diagnostic(ei.value, HERE, "E:deny-load",
                      f"`strict_copy` denies in-kernel bounds checks, but this load of `x` needs a mask on axis {axis}")
    assert np.array_equal(p.unpartition().numpy(), poison)      # refused: nothing written


def test_deny_kernel_checks_accepts_dividing_sizes(backend):
    x = rand(np.random.default_rng(110), (32, 64), "f32")
    assert np.array_equal(launch(strict_copy, ts.empty((32, 64)), (16, 32), ts.tensor(x)), x * 2)


# --- a refused launch changes nothing ----------------------------------------------------------------
def test_refused_launch_writes_nothing_and_leaves_the_partition_usable(backend):
    rng = np.random.default_rng(111)
    z, poison = poisoned(100, "f32", 999.0)
    p = z.partition((32,))
    bad_x = ts.tensor(rand(rng, 100, "f16"))
    with pytest.raises(ts.LaunchError):
        copy1d(p, bad_x)
    with pytest.raises(ts.LaunchError):
        copy1d.launch(p, ts.tensor(rand(rng, 100, "f32")), grid=(2,))
    assert np.array_equal(p.unpartition().numpy(), poison)
    x = rand(rng, 100, "f32")
    assert np.array_equal(launch(copy1d, z, (32,), ts.tensor(x)), x + 1)   # and it still launches


def test_refused_launch_leaves_an_empty_output_uninitialised():
    z = ts.empty(100)
    p = z.partition((32,))
    with pytest.raises(ts.LaunchError):
        copy1d(p, ts.tensor(np.ones(100, np.float16) * 3))
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        p.unpartition().numpy()


def test_a_partition_may_be_launched_again(backend):
    rng = np.random.default_rng(112)
    x1, x2 = rand(rng, 50, "f32"), rand(rng, 50, "f32")
    p = ts.empty(50).partition((16,))
    copy1d(p, ts.tensor(x1))
    copy1d(p, ts.tensor(x2)).sync()
    assert np.array_equal(p.unpartition().numpy(), x2 + 1)


# --- persistent kernels: any grid size, but one axis; no program, no write ----------------------
@ts.kernel
def visit(z: ts.MutTiles[ts.i32, (4,)]):
    for idx in z.tiles():
        z.store(z.load(idx) + 1, idx)


@ts.kernel
def fill_tiles(z: ts.MutTiles[ts.f32, (16,)]):
    for idx in z.tiles():
        z.store(ts.full((16,), 1.0, ts.f32), idx)


def test_a_multi_axis_grid_for_a_persistent_kernel_is_refused():
    # A past bug: grid=(2, 3) ran the walk once per program along axis 1, so every tile was
    # written by 3 programs (a race, and z.load() + 1 counted 3).
    z = ts.zeros(16, ts.i32)
    p = z.partition((4,))
    with pytest.raises(ts.LaunchError) as ei:
        visit.launch(p, grid=(2, 3))
    assert "has more than one axis" in ei.value.message and "grid=(6,)" in ei.value.help
    visit.launch(p, grid=(6, 1)).sync()          # trailing 1s are one axis
    assert (p.unpartition().numpy() == 1).all()


def test_a_persistent_launch_with_no_program_initialises_nothing():
    # A past bug: grid=0 ran no program but marked the ts.empty output as written.
    z = ts.empty(64)
    p = z.partition((16,))
    fill_tiles.launch(p, grid=0).sync()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        p.unpartition().numpy()


@ts.kernel
def same_dtype(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


def test_a_dtype_name_bound_twice_names_both_sources_and_how_to_agree():
    z = ts.empty(16, ts.f32).partition((16,))
    with pytest.raises(ts.LaunchError) as ei:
        same_dtype(z, ts.tensor(np.zeros(16, np.float16)))
    assert "`T` is ts.f32 from one argument but ts.f16 from the dtype of `x`" in ei.value.message
    assert "arguments that share a dtype name must agree: convert one with astype" in str(ei.value)
    _launch_error_text(ei.value)
