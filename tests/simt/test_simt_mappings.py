"""Every permit mapping hands out each element exactly once (the CPU executor's sanitizer would
report a second writer as a race), and the grid derived from it covers the output."""
import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe import simt

C64 = simt.Contract(block=(64,))


@simt.kernel(contract=C64)
def by_run(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.run(3)):
        out[p] = p[0]


@simt.kernel(contract=C64)
def by_chunk(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.chunk(3)):
        out[p] = p[0]


@simt.kernel(contract=C64)
def by_grid_stride(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.grid_stride()):
        out[p] = p[0]


@simt.kernel(contract=C64)
def by_warp_slab(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_warp(40)):
        out[p] = p[0]


@simt.kernel(contract=C64)
def by_block_slab(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_block(100)):
        out[p] = p[0]


@pytest.mark.parametrize("kernel", [by_run, by_chunk, by_grid_stride, by_warp_slab, by_block_slab],
                         ids=lambda k: k.name)
@pytest.mark.parametrize("n", [1, 150, 389])
def test_rank1_mappings_cover_each_element_once(kernel, n):
    out = ts.empty(n)                                  # write-only until covered (S14)
    kernel(out).sync()
    np.testing.assert_array_equal(out.numpy(), np.arange(n, dtype=np.float32))


@simt.kernel(contract=simt.Contract(block=(8, 4)))
def by_thread_2d(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
    for p in out.permits(simt.per_thread()):
        out[p] = p[0] * 1000 + p[1]


@simt.kernel(contract=simt.Contract(block=(4, 2, 2)))
def by_thread_3d(out: simt.Disjoint[ts.f32, ("A", "B", "C")], A: int, B: int, C: int):
    for p in out.permits(simt.per_thread()):
        out[p] = p[0] * 100 + p[1] * 10 + p[2]


@simt.kernel(contract=C64)
def by_warp_rows(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
    for p in out.permits(simt.per_warp()):
        out[p] = p[0] * 1000 + p[1]


@simt.kernel(contract=C64)
def by_block_rows(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
    for p in out.permits(simt.per_block()):
        out[p] = p[0] * 1000 + p[1]


def test_rank2_and_rank3_mappings():
    r, c = np.meshgrid(np.arange(9), np.arange(11), indexing="ij")
    want = (r * 1000 + c).astype(np.float32)
    for kernel in (by_thread_2d, by_warp_rows, by_block_rows):
        out = torch.full((9, 11), float("nan"))
        kernel(out).sync()
        np.testing.assert_array_equal(out.numpy(), want, err_msg=kernel.name)
    a, b, cc = np.meshgrid(np.arange(3), np.arange(5), np.arange(6), indexing="ij")
    out = torch.full((3, 5, 6), float("nan"))
    by_thread_3d(out).sync()
    np.testing.assert_array_equal(out.numpy(), (a * 100 + b * 10 + cc).astype(np.float32))


def test_grid_stride_takes_any_grid():
    out = torch.full((300,), float("nan"))
    by_grid_stride.launch(out, grid=(1,)).sync()       # one block loops over everything
    np.testing.assert_array_equal(out.numpy(), np.arange(300, dtype=np.float32))


@simt.kernel(contract=C64)
def rotate_in_block(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    s = simt.shared((64,), ts.f32)
    for p in s.permits(simt.per_thread()):
        s[p] = x.get(simt.global_id(), -1.0)           # ragged last block: past N reads the default
    simt.barrier()                                     # reached by every thread, with a permit or not
    v = s[(simt.thread_id() + 1) % 64]
    for p in out.permits(simt.per_thread()):
        out[p] = v


def test_a_ragged_last_block_reaches_the_barrier():
    x = torch.arange(100, dtype=torch.float32)
    out = torch.full((100,), float("nan"))
    rotate_in_block(out, x).sync()
    want = np.concatenate([np.roll(np.arange(64), -1), np.roll(np.r_[np.arange(64, 100), -np.ones(28)], -1)[:36]])
    np.testing.assert_array_equal(out.numpy(), want.astype(np.float32))


def test_a_grid_stride_launch_with_no_blocks_writes_nothing():
    out = ts.empty(10)
    by_grid_stride.launch(out, grid=(0,)).sync()
    with pytest.raises(ts.OwnershipError, match="has not been written"):
        out.numpy()
