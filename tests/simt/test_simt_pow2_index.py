"""The lowering turns `a % c` and `a // c` of an int by a power-of-two compile-time c into `a & (c - 1)`
and `a >> log2(c)`: Python's floor % and // exactly, so only the instruction count changes (numba's
signed % and // fix up negative operands: the f16 word transpose spent ~40 PTX instructions a word
on its tile indices, ~15 after). Floats keep their %."""
import torch

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples import transpose_half

B = simt.Contract(block=(32,))
HALF = 8


@simt.kernel(contract=B)
def mods(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int, S: int, C: simt.Const[int]):
    for p in out.permits(simt.per_thread()):
        out[p] = ((p[0] - S) % C + (p[0] - S) // HALF) * 1.0 + x[p] % 2.0


def test_power_of_two_mods_and_divisions_of_ints_become_masks_and_shifts():
    src = mods.numba_source(torch.zeros(40), torch.zeros(40), S=7, C=4)
    body = src[src.index("def simt_mods"):]
    assert "(p__0 - S & 3)" in body and "(p__0 - S >> 3)" in body, body
    assert "x, p__0) % __f32(2.0)" in body, body             # a float's % stays numba's


def test_the_masks_are_pythons_floor_mod_and_division_for_negative_ints_too():
    for a in range(-300, 300):
        for k in range(7):
            assert a % (1 << k) == a & ((1 << k) - 1) and a // (1 << k) == a >> k


def test_the_word_transpose_indexes_its_tile_with_masks():
    src = transpose_half.transpose_pairs.numba_source(torch.zeros(64, 32, dtype=torch.int32),
                                                      torch.zeros(64, 32, dtype=torch.int32))
    body = src[src.index("def simt_transpose_pairs"):]
    assert " % " not in body and " // " not in body and f"& {2 * transpose_half.TC - 1}) >> 1" in body, body


def test_the_cpu_executor_floors_negative_operands():
    # the CPU executor runs the kernel's Python, not the lowering: the lowered & and >> are checked
    # against the same oracle on the GPU (tests/gpu/test_simt_gpu_words.py, floor_ops)
    x = torch.randn(40)
    out = torch.zeros(40)
    mods(out, x, S=7, C=4).sync()
    p = torch.arange(40) - 7
    torch.testing.assert_close(out, (p % 4 + p // 8).float() + x % 2.0)


@simt.kernel(contract=B)
def by_const(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: int, C: simt.Const[int]):
    for p in out.permits(simt.per_thread()):
        out[p] = ((p[0] - S) % C + (p[0] - S) // C) * 1.0


def test_a_power_of_two_wider_than_64_bits_keeps_numbas_ops():
    # a >> 64 of a 64-bit int is undefined (LLVM: poison) and 2**64 - 1 is no int64 mask
    body = by_const.numba_source(torch.zeros(8), S=1, C=1 << 64)
    assert "% 18446744073709551616" in body and "// 18446744073709551616" in body and ">>" not in body, body
    body = by_const.numba_source(torch.zeros(8), S=1, C=1 << 63)     # still a shift by 63 and an int64 mask
    assert "& 9223372036854775807" in body and ">> 63" in body, body
