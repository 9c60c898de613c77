"""What the fuzzers found, minimised, as regression tests (docs/fuzzing.md says how to add one).

Each test names the fuzzer's case it came from. A find that is not fixed yet is marked
`xfail(strict=True)`, so its fix shows up as an XPASS and the marker comes off.
"""
import os

import numpy as np
import pytest
import torch

import tilesafe as ts


# --- kernel fuzzer: tile indices whose element offset wraps 32 bits -------------------------
# Found before the 64-bit tile-offset fix (issue 15 item 2): Triton computed
# `index * tile` in 32 bits, so tile -2**31 of 2 elements started at element 0 and read
# x[0:2] instead of padding (the reference interpreter, which multiplies exactly, read 0).

@ts.kernel(sanitize=True)
def _load_at(z: ts.Mut[ts.f32, (2,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    z.store(ts.load(x, (s,), shape=(2,)))


@ts.kernel(sanitize=True)
def _load_at_count_times(z: ts.Mut[ts.f32, (1, 2)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int, s: int):
    # num_tiles is i32, so num_tiles * s wraps in 32 bits first: 2 * 2**30 is -2**31, whose
    # element offset -2**32 wraps 32 bits to 0 again.
    z.store(ts.load(x, (4, ts.num_tiles(x.partition((1, 2)), 1) * s), shape=(1, 2)))


def _x(shape):
    return np.random.default_rng(15).standard_normal(shape).astype(np.float32) + 3.0   # no zeros


@pytest.mark.parametrize("s", [-2**31, 2**31 - 1, 2**30, -2**30])
def test_a_tile_index_whose_offset_wraps_32_bits_reads_padding(backend, s):
    x = _x(8)
    z = ts.full((4,), float("nan"))
    got = _load_at(z.partition((2,)), ts.tensor(x), s=s).sync().unpartition().numpy()
    # tile s covers elements [2 s, 2 s + 2): all outside x for these s, so every block reads 0
    np.testing.assert_array_equal(got, np.zeros(4, np.float32))


def test_a_wrapped_index_product_still_reads_padding(backend):
    x = ts.tensor(_x((4, 6))).T                    # (6, 4), strided: num_tiles(., 1) == 2
    z = ts.full((8, 1), float("nan"))
    got = _load_at_count_times(z.partition((1, 2)), x, s=2**30).sync().unpartition().numpy()
    # 2 * 2**30 wraps to -2**31 (i32): tile -2**31 starts at element -2**32, outside x
    np.testing.assert_array_equal(got, np.zeros((8, 1), np.float32))


# --- runtime fuzzer: a DLPack alias of lent memory -------------------------------------------
# Found before storage state was found by address (issue 15 item 3): a torch tensor made
# with torch.from_dlpack has its own storage object, so ts.from_torch of it got a fresh state
# that knew nothing of the partition lending the same bytes, and a host write went through.

@pytest.mark.parametrize("alias", ["torch", "numpy"])
def test_a_dlpack_alias_cannot_write_bytes_lent_to_a_partition(alias):
    t = torch.arange(1.0, 7.0)
    a = ts.from_torch(t)
    p = a.partition((2,))
    other = torch.from_dlpack(t) if alias == "torch" else torch.from_numpy(np.from_dlpack(t))
    b = ts.from_torch(other)
    with pytest.raises(ts.OwnershipError) as ei:
        b[...] = 0.0
    assert "lent to a partition" in ei.value.message
    assert p.unpartition() is a
    np.testing.assert_array_equal(a.numpy(), np.arange(1.0, 7.0, dtype=np.float32))



# --- runtime fuzzer: torch writing unlent bytes kept a partition lent -----------------------
# Found before version-counter moves became warnings when only part of a storage is lent
# (issue 15 item 7, ef83466): torch's counter covers the whole storage, so a torch write to
# bytes nobody lent made unpartition() refuse, and the partition stayed lent for ever.

def test_torch_writing_other_bytes_of_the_storage_does_not_keep_a_partition_lent():
    a = ts.tensor(np.arange(1.0, 5.0, dtype=np.float32))
    lent = a[0:2]
    t = a[2:4].to_torch()                         # the other half, handed to torch
    p = lent.partition((2,))
    t.fill_(5.0)                                  # legal: those bytes are not lent
    with pytest.warns(RuntimeWarning, match="torch modified the storage"):
        assert p.unpartition() is lent
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 5.0, 5.0])

# --- GPU kernel fuzzer: a branch Triton folds to a constant crashes Triton's compiler --------
# NEW, not fixed: found by the GPU fuzzer on the H200 (13 of 2696 random kernels). A condition
# such as `ts.block_id(0) != ts.block_id(0)` is emitted as `tl.program_id(0) != tl.program_id(0)`;
# Triton 3.6 folds it and then fails in its TritonGPUCoalesce pass ("PassManager::run failed",
# after an LLVM assertion `idx < size()`), so a safe kernel's launch fails instead of running.
# It died with a RuntimeError from inside Triton; now it is a ts.CompileError at the kernel's
# definition, with the compiler's message and a help line (backends/triton/compile_errors.py).
# The Triton interpreter and the reference backend run it. Compiling for sm_90 shows it on a CPU.

@ts.kernel
def _never_taken_branch(z: ts.Mut[ts.f32, (4,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    acc = ts.zeros((4,), ts.f32)
    if ts.block_id(0) != ts.block_id(0):          # never true
        acc = acc + ts.load(x, (s,), shape=(4,))
    z.store(acc)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="an interpreted Triton cannot compile")
@pytest.mark.xfail(strict=True, raises=ts.CompileError,
                   reason="Triton 3.6 crashes in TritonGPUCoalesce on a branch whose condition it folds "
                          "(tl.program_id(0) != tl.program_id(0)); tilesafe emits the comparison as written")
def test_a_branch_triton_folds_to_a_constant_compiles_for_hopper():
    pytest.importorskip("triton")
    from tilesafe.runtime.compile_ahead import compile_ahead
    compiled = compile_ahead(_never_taken_branch, ts.spec((10,), ts.f32, tile=(4,)), ts.spec((10,), ts.f32),
                             s=3, arch=90)
    assert "st.global" in compiled.asm["ptx"]


def test_a_never_taken_branch_runs_on_the_cpu_backends(backend):
    z = ts.full((10,), float("nan"))
    got = _never_taken_branch(z.partition((4,)), ts.tensor(_x(10)), s=0).sync().unpartition().numpy()
    np.testing.assert_array_equal(got, np.zeros(10, np.float32))


# --- kernel fuzzer: an i64 scalar minus a dynamic loop's variable on Triton's interpreter -----
# Found by the kernel fuzzer (1 of 1200 random kernels), before casts were emitted as tl.cast.
# With `s` an i64 scalar (a value past 2**31), `k - s` made the Triton source cast the loop
# variable with `k.to(tl.int64)`; in Triton's interpreter a range yields Python ints, so the
# launch died with InterpreterError("'int' object has no attribute 'to'"). The reference
# backend ran it, and compiled on the H200 it ran correctly (`.to` is tl.cast's alias there).

@ts.kernel(sanitize=True)
def _loop_minus_wide_scalar(z: ts.Mut[ts.f32, (8,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    acc = ts.zeros((8,), ts.f32)
    for k in range(min(ts.num_tiles(x.partition((8,)), 0), 3)):
        acc = acc + ts.load(x, (k - s,), shape=(8,))     # tile k - s: outside x for s = 2**31
    z.store(acc)


def test_an_i64_scalar_minus_a_loop_variable_runs(backend):
    z = ts.full((8,), float("nan"))
    got = _loop_minus_wide_scalar(z.partition((8,)), ts.tensor(_x(20)), s=2**31).sync().unpartition().numpy()
    np.testing.assert_array_equal(got, np.zeros(8, np.float32))


# The same crash with a loop over constant bounds (seen by hand): `ts.astype(k, ts.f32)` was
# emitted as `k.to(tl.float32)`, and the interpreter's k is a Python int there too.

@ts.kernel
def _astype_of_a_static_loop_variable(z: ts.Mut[ts.f32, (4,)], R: ts.Const[int]):
    acc = ts.zeros((4,), ts.f32)
    for k in range(1, R + 1):
        acc = acc + ts.astype(k, ts.f32)
    z.store(acc)


def test_astype_of_a_loop_variable_runs(backend):
    z = ts.full((8,), float("nan"))
    got = _astype_of_a_static_loop_variable(z.partition((4,)), R=3).sync().unpartition().numpy()
    np.testing.assert_array_equal(got, np.full(8, sum(range(1, 4)), np.float32))


# --- kernel fuzzer: a scalar in [2**31, 2**32) is unsigned 32-bit in Triton's interpreter ----
# Found by the kernel fuzzer (6 of 1000 random kernels), before the interpreted launch passed
# such ints as int64 data (backends/triton/adapter.py). tilesafe and compiled Triton type a
# runtime int of 2**31 as i64, but Triton 3.6's interpreter stored it as a NumPy uint32, so
# `s + s` wrapped to 0: the loop below ran 0 times instead of 3, and the load read tile 0 (in
# range, real data) where tile 2**32 lies past the tensor (padding). On the H200 the compiled
# kernel got both right (3 trips, padding); only the triton-interpreter backend was wrong.

@ts.kernel(sanitize=True)
def _doubled_scalar(z: ts.Mut[ts.f32, (4,)], y: ts.Mut[ts.f32, (4,)], x: ts.Ref[ts.f32, ("N",)], N: int, s: int):
    acc = ts.zeros((4,), ts.f32)
    for i in range(min(s + s, 3)):
        acc = acc + ts.load_tile_like(x, z)
    z.store(acc)
    y.store(ts.load(x, (s + s,), shape=(4,)))


@pytest.mark.parametrize("s", [2**31, 2**32 - 1])
def test_a_scalar_past_i32_is_64_bit_in_arithmetic(backend, s):
    x = _x(8)
    z, y = ts.full((8,), float("nan")), ts.full((8,), float("nan"))
    fut = _doubled_scalar(z.partition((4,)), y.partition((4,)), ts.tensor(x), s=s)
    zp, yp = fut.sync()
    np.testing.assert_array_equal(zp.unpartition().numpy(), x + x + x)   # min(2 s, 3) == 3 trips
    np.testing.assert_array_equal(yp.unpartition().numpy(), np.zeros(8, np.float32))   # tile 2 s: padding
