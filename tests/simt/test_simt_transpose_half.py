"""The 16-bit transpose that moves int32 words (examples/transpose_half.py), integer shifts and masks
as the GPU computes them (64-bit ints, the low bits stored), and the permits of the word walks."""
import numpy as np
import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples import transpose_half as example

HERE = __file__


def halves_transposed(x32: np.ndarray) -> np.ndarray:
    """The oracle: the int32 words of an (R, W) array seen as (R, 2W) 16-bit values, transposed, as words."""
    h = x32.view(np.uint16).reshape(x32.shape[0], 2 * x32.shape[1])
    return np.ascontiguousarray(h.T).view(np.int32)


@pytest.mark.parametrize("shape", [(2, 1), (6, 5), (66, 35)])    # one word; ragged tiles; two tiles each way
def test_pairs_of_halves_move_as_words(shape):
    rng = np.random.default_rng(1)
    x = rng.integers(-2 ** 31, 2 ** 31, size=shape, dtype=np.int64).astype(np.int32)
    x[0, 0] = np.int32(-1)                          # 0xFFFF halves: the sign bits must not smear
    out = torch.full((2 * shape[1], shape[0] // 2), 7, dtype=torch.int32)
    example.transpose_pairs(out, torch.from_numpy(x)).sync()
    np.testing.assert_array_equal(out.numpy(), halves_transposed(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_transpose_f16_through_words(dtype):
    x = torch.randn(70, 36, generator=torch.Generator().manual_seed(2)).to(dtype)
    out = torch.full((36, 70), float("nan"), dtype=dtype)
    example.transpose_f16(out, x).sync()
    assert torch.equal(out, x.t())


def test_transpose_f16_with_an_odd_extent_moves_halves():
    x = torch.randn(9, 70, generator=torch.Generator().manual_seed(3)).half()     # 9 rows: no int32 view of out
    out = torch.full((70, 9), float("nan"), dtype=torch.float16)
    example.transpose_f16(out, x).sync()
    assert torch.equal(out, x.t())


def test_transpose_f16_refuses_an_output_of_the_wrong_shape():
    # the word views' extents are not tied to each other: a wrong out ran and left words unwritten
    x = torch.randn(70, 36, generator=torch.Generator().manual_seed(4)).half()
    with pytest.raises(ts.LaunchError, match="R"):
        example.transpose_f16(torch.zeros(36, 68, dtype=torch.float16), x).sync()


B = simt.Contract(block=(32,))


@simt.kernel(contract=B)
def bits(out: simt.Disjoint[ts.i32, ("N",)], x: simt.Ref[ts.i32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = ((x[p] >> 16) & 0xFFFF) | (x[p] & 0xFFFF0000) | (p[0] << 31)


def test_integer_masks_and_shifts_keep_the_low_bits_as_the_gpu_does():
    # numba computes ints in 64 bits and the store keeps the low 32: a mask above int32, a shift out of
    # it and an arithmetic right shift of a negative word (old CPU executor: OverflowError)
    x = torch.tensor([-1, 0x12345678, -0x7FFF0000, 5], dtype=torch.int32)
    out = torch.zeros(4, dtype=torch.int32)
    bits(out, x).sync()
    w = x.numpy().astype(np.int64)
    want = ((w >> 16) & 0xFFFF) | (w & 0xFFFF0000) | (np.arange(4) << 31)
    np.testing.assert_array_equal(out.numpy(), want.astype(np.uint32).view(np.int32))


def test_a_word_written_at_a_computed_pair_index_is_refused():
    with pytest.raises(ts.KernelError) as e:
        @simt.kernel(contract=simt.Contract(block=(32, 8)))
        def pairs_by_index(out: simt.Disjoint[ts.i32, ("C", "H")], x: simt.Ref[ts.i32, ("R", "W")],
                           C: int, H: int, R: int, W: int):
            for p in out.permits(simt.chunk(8)):
                out[2 * p[1], p[0]] = x.get((p[0], p[1]), 0)     # MARK computed
    assert_diagnostic(e.value, HERE, "MARK computed", "computed index")


def test_reading_the_word_tile_before_the_barrier_is_refused():
    with pytest.raises(ts.KernelError) as e:
        @simt.kernel(contract=simt.Contract(block=(32, 8)))
        def pairs_no_barrier(out: simt.Disjoint[ts.i32, ("C", "H")], x: simt.Ref[ts.i32, ("R", "W")],
                             C: int, H: int, R: int, W: int):
            tile = simt.shared((64, 33), ts.i32)
            for p in tile.permits(simt.chunk(8)):
                tile[p] = x.get((p[0], p[1]), 0)
            for p in out.permits(simt.chunk(8)):
                out[p] = tile[p[1] % 32, p[0] % 64 // 2] & 0xFFFF     # MARK early
    assert_diagnostic(e.value, HERE, "MARK early", "before a barrier")


def test_two_threads_holding_one_word_is_refused():
    with pytest.raises(ts.KernelError) as e:
        @simt.kernel(contract=B)
        def shared_word(out: simt.Disjoint[ts.i32, ("N",)], N: int):
            for p in out.permits(simt.at(simt.global_id() // 2)):     # MARK overlap
                out[p] = 0xFFFF
    assert_diagnostic(e.value, HERE, "MARK overlap", "overlap")
