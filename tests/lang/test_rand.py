"""`ts.rand(seed, offsets)` in a kernel: Philox 4x32-10 uniforms, equal on every backend.

The oracle is tests/philox_oracle.py, a Philox 4x32-10 written from the published algorithm
with Python integers, checked here against the Random123 known-answer vectors, plus the
uniform mapping of Triton's `tl.rand`.
Results are compared bit for bit. Negative tests pin the error class, message and line.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
from lang_helpers import assert_diagnostic, poisoned
from philox_oracle import philox4x32_10, uniform as oracle_uniform

import tilesafe as ts

HERE = os.path.abspath(__file__)
M32 = 0xFFFFFFFF


def test_oracle_matches_random123_known_answers():
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32_10((M32,) * 4, (M32, M32)) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert philox4x32_10((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == \
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


# --- kernels ----------------------------------------------------------------------------------
@ts.kernel
def noise(z: ts.Mut[ts.f32, ("B",)], seed: int, base: int, B: ts.Const[int]):
    offs = base + ts.block_id(0) * B + ts.arange(0, B)                # (B,) i32 counters
    z.store(ts.rand(seed, offs))


@ts.kernel
def noise_from_tensors(z: ts.Mut[ts.f32, ("B",)], seeds: ts.Ref[ts.i64, (1,)], offs: ts.Ref["TO", ("N",)],
                       TO: ts.Const[ts.DType], B: ts.Const[int], N: int):
    seed = ts.scalar(ts.load(seeds, (0,), shape=(1,)))                # i64 scalar read on the device
    z.store(ts.rand(seed, ts.load_tile_like(offs, z)))


@pytest.mark.parametrize("seed", [0, 42, -3, 2**31 - 1, 2**40 + 5, -2**50])
def test_rand_equals_the_oracle_bit_for_bit(backend, seed):
    base = 1000
    got = noise(poisoned((21,), "f32")[0].partition((8,)), seed, base).sync().unpartition().numpy()
    want = [oracle_uniform(seed, base + i) for i in range(21)]
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("odt", ["i32", "i64"])
def test_rand_with_a_device_seed_and_wide_offsets(backend, odt):
    offsets = [0, 1, -1, -7, 2**31 - 1, -2**31, 5, 6] if odt == "i32" else \
        [0, 1, 2**40 + 3, -1, -2**40, 2**62, 7, -2**63]
    seed = -(2**40) - 17
    z = noise_from_tensors(poisoned((8,), "f32")[0].partition((4,)), ts.tensor(np.array([seed], np.int64)),
                           ts.tensor(np.array(offsets, getattr(np, "int32" if odt == "i32" else "int64"))))
    got = z.sync().unpartition().numpy()
    np.testing.assert_array_equal(bits(got), bits([oracle_uniform(seed, o, odt == "i64") for o in offsets]))


def test_rand_is_uniform_on_zero_one(backend):
    got = noise(ts.empty((4096,)).partition((1024,)), 7, 0).sync().unpartition().numpy()
    assert got.min() >= 0.0 and got.max() < 1.0
    assert abs(got.mean() - 0.5) < 0.02 and abs(got.var() - 1 / 12) < 0.01
    assert len(np.unique(got)) > 4000                                   # no repeats to speak of


def test_rand_depends_on_the_offset_not_the_tiling(backend):
    a = noise(ts.empty((32,)).partition((8,)), 9, 0).sync().unpartition().numpy()
    b = noise(ts.empty((32,)).partition((32,)), 9, 0).sync().unpartition().numpy()
    c = noise(ts.empty((32,)).partition((8,)), 10, 0).sync().unpartition().numpy()
    np.testing.assert_array_equal(bits(a), bits(b))
    assert not np.any(a == c)


TL_RAND = """
import numpy as np, torch, triton, triton.language as tl

@triton.jit
def k(out, seed, N: tl.constexpr):
    o = tl.arange(0, N) - 3
    tl.store(out + tl.arange(0, N), tl.rand(seed, o))

for seed in (5, -9, 2**45 + 1):
    out = torch.empty(8)
    k[(1,)](out, seed, N=8)
    print(" ".join(str(int(w)) for w in out.numpy().view(np.uint32)))
"""


def test_rand_equals_tritons_tl_rand_under_its_interpreter():
    """The Triton backend lowers to tl.rand: the oracle must be what tl.rand computes (run in
    a child process, since TRITON_INTERPRET is read once per process)."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", TL_RAND], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [[int(w) for w in line.split()] for line in out.stdout.split("\n") if line.strip()]
    for seed, row in zip((5, -9, 2**45 + 1), rows, strict=True):
        assert row == bits([oracle_uniform(seed, i - 3) for i in range(8)]).tolist()


# --- refused arguments ------------------------------------------------------------------------
def test_a_float_seed_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (8,)], s: float):
            z.store(ts.rand(s, ts.arange(0, 8)))  # E:float-seed
    assert_diagnostic(ei.value, HERE, "E:float-seed", "the seed of ts.rand must be an i32 or i64 scalar, got a f32")


def test_a_tile_seed_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (8,)]):
            z.store(ts.rand(ts.arange(0, 8), ts.arange(0, 8)))  # E:tile-seed
    assert_diagnostic(ei.value, HERE, "E:tile-seed", "the seed of ts.rand must be a scalar, got a i32[8] tile")


def test_float_offsets_are_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (8,)], x: ts.Ref[ts.f32, (8,)]):
            z.store(ts.rand(1, ts.load_tile_like(x, z)))  # E:float-offsets
    assert_diagnostic(ei.value, HERE, "E:float-offsets",
                      "the offsets of ts.rand must be an i32 or i64 tile (or scalar), got a f32[8] tile")


def test_narrow_int_offsets_are_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (8,)], x: ts.Ref[ts.i16, (8,)]):
            z.store(ts.rand(1, ts.load_tile_like(x, z)))  # E:i16-offsets
    assert_diagnostic(ei.value, HERE, "E:i16-offsets", "got a i16[8] tile")
    assert "ts.astype(offsets, ts.i32)" in str(ei.value)


def test_a_bool_seed_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (8,)]):
            z.store(ts.rand(True, ts.arange(0, 8)))  # E:bool-seed
    assert_diagnostic(ei.value, HERE, "E:bool-seed", "got bool True")


def test_the_host_signature_inside_a_kernel_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (8,)]):
            z.store(ts.rand((8,), seed=3))  # E:host-form
    assert_diagnostic(ei.value, HERE, "E:host-form", "bad arguments to `rand`")
