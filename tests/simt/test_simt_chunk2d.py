"""simt.chunk(k) on rank-2 targets (a column of k rows a thread, rows strided by block y), the
`% T` bound that proves tile reads, and the loads-first lowering of such walks (issue 18: the
transpose's 64 x 8 block moving 8 elements a thread)."""
import numpy as np
import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt import mappings as M
from tilesafe.simt.examples import transpose as example

HERE = __file__
B2 = simt.Contract(block=(8, 4))


@simt.kernel(contract=B2)
def by_chunk_2d(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
    for p in out.permits(simt.chunk(3)):     # block (8, 4): 8 columns, 12 rows a block
        out[p] = p[0] * 1000 + p[1]


@pytest.mark.parametrize("shape", [(1, 1), (12, 8), (13, 9), (25, 30)])
def test_rank2_chunk_covers_each_element_once(shape):
    out = ts.empty(shape)                      # S14: readable only if the permits cover every element
    by_chunk_2d(out).sync()
    r, c = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    np.testing.assert_array_equal(out.numpy(), (r * 1000 + c).astype(np.float32))


def test_rank2_chunk_derives_the_grid_from_columns_and_row_chunks():
    m = M.Mapping(M.CHUNK, 3)
    assert M.grid_of(m, (25, 30), (8, 4)) == (4, 3)         # ceil(30 / 8) columns, ceil(25 / 12) rows
    with pytest.raises(ts.LaunchError, match="does not cover the outputs"):
        by_chunk_2d.launch(torch.empty(25, 30), grid=(4, 2))


def test_a_thread_holds_one_column_and_rows_strided_by_block_y():
    pos = type("P", (), dict(tid=(5, 2, 0), bid=(1, 2, 0), bdim=(8, 4, 1), gdim=(4, 3, 1)))()
    got = M.permits(M.Mapping(M.CHUNK, 3), (40, 30), pos)
    assert got == [(2 * 12 + 2, 13), (2 * 12 + 6, 13), (2 * 12 + 10, 13)]
    assert M.permits(M.Mapping(M.CHUNK, 3), (27, 30), pos) == [(26, 13)]      # ragged: rows past 27 dropped


@simt.kernel(contract=B2)
def flip_tiles(out: simt.Disjoint[ts.f32, ("R", "C")], x: simt.Ref[ts.f32, ("R", "C")], R: int, C: int):
    s = simt.shared((12, 8), ts.f32)
    for p in s.permits(simt.chunk(3)):         # within the block: rows ty, ty + 4, ty + 8; column tx
        s[p] = x.get((simt.block_id(1) * 12 + p[0], simt.block_id(0) * 8 + p[1]), -1.0)
    simt.barrier()
    for p in out.permits(simt.chunk(3)):       # each block's tile, its rows reversed
        out[p] = s[11 - p[0] % 12, p[1] % 8]


def test_rank2_chunk_on_shared_memory_and_modulo_proofs():
    x = torch.randn(24, 16)
    out = torch.full((24, 16), float("nan"))
    flip_tiles(out, x).sync()
    want = x.view(2, 12, 2, 8).flip(1).reshape(24, 16)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert flip_tiles.checks()["checked_reads"] == []     # `11 - p[0] % 12` is in [0, 11]: proven


@simt.kernel(contract=simt.Contract(block=(64,)))
def rotate_left(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    s = simt.shared((64,), ts.f32)
    for p in s.permits(simt.per_thread()):
        s[p] = x.get(simt.global_id(), 0.0)
    simt.barrier()
    v = s[(simt.thread_id() - 5 - simt.block_id()) % 64]     # block_id's range is unknown, % bounds it
    for p in out.permits(simt.per_thread()):
        out[p] = v


def test_modulo_by_a_constant_bounds_a_negative_operand():
    x = torch.arange(64, dtype=torch.float32)
    out = torch.full((64,), float("nan"))
    rotate_left(out, x).sync()
    assert out.tolist() == np.roll(np.arange(64), 5).tolist()
    assert rotate_left.checks()["checked_reads"] == []


@simt.kernel(contract=simt.Contract(block=(1024,)))
def wide_products(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    s = simt.shared((1024,), ts.f32)
    for p in s.permits(simt.per_thread()):
        s[p] = x.get(simt.global_id(), 0.0)
    simt.barrier()
    t = simt.thread_id()
    a = s[(t * t * t * t) // 1073741824]     # E:int32-overflow (below 1024 as math; t * t * t * t overflows int32)
    b = s[(t * t * t * t) % 1024]             # % bounds whatever its operand held
    c = s[(t * t * t) // 1048576]              # below 2**31 at every step: proven
    for p in out.permits(simt.per_thread()):
        out[p] = a + b + c


def test_a_static_range_beyond_int32_proves_nothing():
    """Thread indices are int32 on the GPU (numba's threadIdx), so `t * t * t * t` wraps there (a
    negative index, read without wraparound by a proven read's __at) while Python's ints do not:
    a range that leaves int32 at any step proves nothing, and the read is checked instead."""
    line = next(i for i, text in enumerate(open(HERE).read().splitlines(), 1) if "E:int32-overflow" in text)
    assert wide_products.checks()["checked_reads"] == [("s", line)]
    x = torch.arange(1024, dtype=torch.float32)
    out = torch.full((1024,), float("nan"))
    wide_products(out, x).sync()
    t = torch.arange(1024, dtype=torch.float64)
    want = (t ** 4 // 2 ** 30) + (t ** 4 % 1024) + (t ** 3 // 2 ** 20)
    assert out.tolist() == want.float().tolist()


@pytest.mark.parametrize("shape", [(1, 1), (64, 64), (37, 45), (130, 70)])
def test_the_transpose_example_moves_eight_elements_a_thread(shape):
    x = torch.randn(*shape)
    out = torch.full(shape[::-1], float("nan"))
    example.transpose(out, x).sync()
    torch.testing.assert_close(out, x.t(), rtol=0, atol=0)
    assert example.transpose.contract.block == (64, 8)
    assert example.transpose.checks() == {"proven_reads": 1, "checked_reads": [], "checked_atomics": []}


def test_rank2_chunk_walks_read_first_and_store_after():
    x = torch.randn(40, 36)
    text = example.transpose.numba_source(torch.empty(36, 40), x)
    body = text[text.index("def simt_transpose"):]
    fast = body[body.index("__v"):body.index("else:")]          # the tile's whole-chunk path
    loads = [fast.index(f"__get2(x, bx * 64 + __p__h{k}") for k in range(3, 11)]
    stores = [fast.index(f"__put2(tile, __p__h{k}, __p__c2, ") for k in range(3, 11)]
    assert max(loads) < min(stores)                             # eight reads in flight, then eight stores


def test_checked_reads_record_the_line_without_a_branch():
    @simt.kernel(contract=simt.Contract(block=(32,)))
    def gather(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("M",)], idx: simt.Ref[ts.i32, ("N",)],
               N: int, M: int):
        for p in out.permits(simt.per_thread()):
            out[p] = x[idx[p]]
    text = gather.numba_source(torch.empty(4), torch.ones(5), torch.zeros(4, dtype=torch.int32))
    ld = text[text.index("def __ld1"):text.index("def __ld2")]
    assert "atomic" not in ld and "bad[0] = max(bad[0], 0 if ok else line)" in ld
    body = text[text.index("def simt_gather"):]
    assert "__ld1(x, __at1(idx, p__0), __bad," in body
    assert body.rstrip().endswith("if __bad[0] != 0:\n        cuda.atomic.max(__err, 0, __bad[0])")


def test_rank2_chunk_needs_a_rank2_block():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=simt.Contract(block=(64,)))
        def k(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
            for p in out.permits(simt.chunk(4)):  # E:chunk-1d-block
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:chunk-1d-block", "simt.chunk(k) over rank-2 `out` needs a rank-2 block")


def test_chunk_does_not_fit_rank3():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=simt.Contract(block=(4, 4, 4)))
        def k(out: simt.Disjoint[ts.f32, ("A", "B", "C")], A: int, B: int, C: int):
            for p in out.permits(simt.chunk(2)):  # E:chunk-rank3
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:chunk-rank3", "simt.chunk(k) does not fit rank-3 `out`")


# -- the GPU ------------------------------------------------------------------------------------

@simt.kernel(contract=simt.Contract(block=(32,)))
def gather(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("M",)], idx: simt.Ref[ts.i32, ("N",)],
           N: int, M: int):
    for p in out.permits(simt.per_thread()):
        out[p] = x[idx[p]]      # checked: idx's values are not known


@pytest.mark.gpu
def test_gpu_a_failed_checked_read_is_reported_at_its_line():
    x = torch.arange(5, dtype=torch.float32, device="cuda")
    idx = torch.tensor([4, 0, 7, 1] * 100, dtype=torch.int32, device="cuda")
    out = torch.full((400,), float("nan"), device="cuda")
    with pytest.raises(ts.SanitizerError) as ei:
        gather(out, x, idx).sync()
    assert ei.value.loc.line == gather.src.loc(gather.info.checked[0][1]).line
    assert out[:4].tolist() == [4, 0, 0, 1]              # the failed read gave element 0, never past x
    good = torch.tensor([4, 0, 2, 1] * 100, dtype=torch.int32, device="cuda")
    gather(out, x, good).sync()                          # the flag was cleared: a good launch passes
    assert out[:4].tolist() == [4, 0, 2, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (37, 45), (5000, 3001), (4096, 4096)])
def test_gpu_transpose_of_ragged_and_whole_tiles(shape):
    x = torch.randn(*shape, device="cuda")
    out = torch.full(shape[::-1], float("nan"), device="cuda")
    example.transpose(out, x).sync()
    assert torch.equal(out, x.t())


@pytest.mark.gpu
def test_gpu_rank2_chunk_on_shared_memory():
    x = torch.randn(50, 37, device="cuda")
    out = torch.full((50, 37), float("nan"), device="cuda")
    flip_tiles(out, x).sync()
    want = torch.full((50, 37), float("nan"))
    flip_tiles(want, x.cpu()).sync()                     # the CPU executor is the specification
    assert torch.equal(out.cpu(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [5, 300, 4096])
def test_gpu_block_sum_with_a_rest(k):
    from tilesafe.simt.examples import block_sum
    x = torch.randn(100_003, device="cuda")
    b = -(-x.numel() // k)
    out = torch.full((b,), float("nan"), device="cuda")
    block_sum.block_sum(out, x, K=k).sync()
    want = torch.nn.functional.pad(x, (0, b * k - x.numel())).view(b, k).double().sum(1).float()
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_gpu_modulo_of_a_negative_operand_stays_in_bounds():
    """numba's % on signed ints is Python's (srem, then the divisor added to a negative remainder),
    so `(tid - 5 - block) % 64` is in [0, 64) on the GPU too, where most operands are negative."""
    x = torch.randn(64 * 40)
    out = torch.full((64 * 40,), float("nan"), device="cuda")
    rotate_left(out, x.cuda()).sync()
    want = torch.full((64 * 40,), float("nan"))
    rotate_left(want, x).sync()                          # the CPU executor is the specification
    assert torch.equal(out.cpu(), want)
    assert want.view(40, 64)[39].tolist() == x.view(40, 64)[39].roll(44).tolist()     # (t - 44) % 64


@pytest.mark.gpu
def test_gpu_wide_products_read_checked_and_right():
    x = torch.arange(1024, dtype=torch.float32)
    out = torch.full((1024,), float("nan"), device="cuda")
    wide_products(out, x.cuda()).sync()                  # no failed check: every index is in bounds as math
    want = torch.full((1024,), float("nan"))
    wide_products(want, x).sync()
    assert torch.equal(out.cpu(), want)
