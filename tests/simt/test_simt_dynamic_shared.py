"""Dynamic shared memory (an array sized by a launch-time `int`) and the GPU's shared-memory
sanitizer (`sanitize=True`): results on the CPU executor against torch, the refusals at definition
and at launch (error class, message, line), and on the GPU (marked gpu) the same kernels through
numba-cuda, including a pool above 48 KiB and a read of shared memory nobody wrote."""
import math

import pytest
import torch
from simt_helpers import assert_diagnostic, marker_line

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples import row_rotate

HERE = __file__
C64 = simt.Contract(block=(64,))


@simt.kernel(contract=C64)
def rotate_long(out: simt.Disjoint[ts.f32, ("B", "S")], x: simt.Ref[ts.f32, ("B", "S")], B: int, S: int,
                K: simt.Const[int]):
    row = simt.shared((S,), ts.f32)
    for p in row.permits(simt.chunk(K)):      # K * 64 >= S: the whole row is staged
        row[p] = x[simt.block_id(), p[0]]
    simt.barrier()
    for p in out.permits(simt.per_block()):
        out[p] = row[(p[1] + 1) % S]


@simt.kernel(contract=simt.Contract(block=(4, 4)), sanitize=True)
def checked_tile(out: simt.Disjoint[ts.f32, ("R", "C")], x: simt.Ref[ts.f32, ("R", "C")], R: int, C: int,
                 SHIFT: simt.Const[int] = 0):
    tile = simt.shared((4, 5), ts.f32)           # column 4 is padding nobody writes
    for p in tile.permits(simt.per_thread()):
        tile[p] = x.get((p[0], p[1]), 0.0)
    simt.barrier()
    for p in out.permits(simt.per_thread()):
        out[p] = tile[simt.thread_id(0), simt.thread_id(1) + SHIFT]  # E:pad-read


@simt.kernel(contract=C64, sanitize=True)
def shared_atomics_checked(out: simt.Disjoint[ts.i32, ("N",)], x: simt.Ref[ts.i32, ("N",)], N: int):
    bins = simt.shared((64,), ts.i32)
    for p in bins.permits(simt.per_thread()):
        bins[p] = 0
    simt.barrier()
    bins.add(x.get(simt.global_id(), 0) % 64, 1)
    simt.barrier()
    for p in out.permits(simt.per_thread()):
        out[p] = bins[simt.thread_id()]


def line_of(path, text):
    with open(path) as f:
        hits = [i for i, line in enumerate(f, 1) if text in line]
    assert len(hits) == 1, hits
    return hits[0]


def rows(b, s, device="cpu"):
    x = torch.randn(b, s, device=device)
    return x, torch.full((b, s), float("nan"), device=device)


# -- the CPU executor ---------------------------------------------------------------------------

@pytest.mark.parametrize("s", [1, 37, 256])
def test_a_dynamic_shared_row_of_any_length(s):
    for kernel in (row_rotate.rotate_rows, row_rotate.rotate_rows_checked):
        x, out = rows(3, s)
        kernel(out, x).sync()
        assert torch.equal(out, torch.roll(x, -1, dims=1))


def test_a_const_chunk_covers_a_longer_dynamic_row():
    x, out = rows(2, 300)
    rotate_long(out, x, K=5).sync()
    assert torch.equal(out, torch.roll(x, -1, dims=1))


def test_reading_a_dynamic_shared_element_nobody_wrote_is_reported():
    x, out = rows(2, 257)                        # 256 elements are staged; element 256 is read by j = 255
    with pytest.raises(ts.SanitizerError) as ei:
        row_rotate.rotate_rows(out, x).sync()
    assert "read of shared memory nobody wrote: `row` at (256,)" in ei.value.message
    assert ei.value.loc.line == line_of(row_rotate.__file__, "out[p] = row[")


def test_the_padding_column_read_is_reported_on_the_cpu_too():
    x, out = torch.randn(4, 4), torch.empty(4, 4)
    checked_tile(out, x).sync()                  # reads columns 0-3: all written
    torch.testing.assert_close(out, x.t(), rtol=0, atol=0)
    with pytest.raises(ts.SanitizerError) as ei:
        checked_tile(out, x, SHIFT=1).sync()     # thread y = 3 reads the padding column
    assert_diagnostic(ei.value, HERE, "E:pad-read", "read of shared memory nobody wrote")


@simt.kernel(contract=C64, sanitize=True)
def get_past_the_written(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: int, W: int):
    s = simt.shared((S,), ts.f32)
    for p in s.permits(simt.per_thread()):
        if p[0] < W:
            s[p] = 1.0
    simt.barrier()
    for p in out.permits(simt.per_thread()):
        out[p] = s.get(simt.thread_id(), -1.0)  # E:get-unwritten


def test_a_get_of_a_shared_element_nobody_wrote_is_reported_at_its_line():
    out = torch.empty(64)
    get_past_the_written(out, S=32, W=32).sync()      # threads 32-63 read past the end: the default
    assert out.tolist() == [1.0] * 32 + [-1.0] * 32
    with pytest.raises(ts.SanitizerError) as ei:
        get_past_the_written(out, S=32, W=16).sync()  # inside the array, but elements 16-31 never written
    assert_diagnostic(ei.value, HERE, "E:get-unwritten", "read of shared memory nobody wrote: `s` at (16,)")


def test_shared_atomics_in_a_sanitized_kernel():
    x = torch.randint(0, 64, (64,), dtype=torch.int32)
    out = torch.full((64,), -1, dtype=torch.int32)
    shared_atomics_checked(out, x).sync()
    assert torch.equal(out, torch.bincount(x, minlength=64).int())


def test_only_the_dynamic_array_is_sized_at_launch():
    # the contract's 1 KiB holds the static array at definition; the dynamic one is checked at launch
    @simt.kernel(contract=simt.Contract(block=(64,), shared_memory=1024))
    def both(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: int):
        fixed = simt.shared((64,), ts.f32)
        dyn = simt.shared((S,), ts.f32)
        for p in fixed.permits(simt.per_thread()):
            fixed[p] = 1.0
        for p in dyn.permits(simt.per_thread()):
            dyn[p] = 2.0
        simt.barrier()
        for p in out.permits(simt.per_thread()):
            out[p] = fixed[simt.thread_id()] + dyn.get(simt.thread_id(), 0.0)
    out = torch.empty(64)
    both(out, S=10).sync()
    assert out.tolist() == [3.0] * 10 + [1.0] * 54
    with pytest.raises(ts.LaunchError) as ei:
        both(out, S=200)  # E:static-plus-dynamic
    assert_diagnostic(ei.value, HERE, "E:static-plus-dynamic",
                      "needs 200 x f32 = 800 bytes, plus 256 bytes of static shared memory: more than the "
                      "contract's shared_memory=1024")


def test_static_shared_bytes_and_their_shadow_bytes():
    # the static arrays' bytes, and the sanitizer's shadow beside them (a byte per element); a dynamic array is neither
    from tilesafe.simt.analysis import shared_bytes
    from tilesafe.simt.shared_shadow import static_shadow_bytes
    assert (shared_bytes(checked_tile.info, {}), static_shadow_bytes(checked_tile.info, {})) == (4 * 5 * 4, 4 * 5)
    assert (shared_bytes(shared_atomics_checked.info, {}), static_shadow_bytes(shared_atomics_checked.info, {})) \
        == (64 * 4, 64)
    assert (shared_bytes(rotate_long.info, {}), static_shadow_bytes(rotate_long.info, {})) == (0, 0)


# -- refusals -----------------------------------------------------------------------------------

def test_a_dynamic_size_beyond_the_contract_is_refused_at_launch():
    k = simt.kernel(contract=simt.Contract(block=(64,), shared_memory=1024))(row_rotate.rotate_rows.fn)
    x, out = rows(2, 300)
    with pytest.raises(ts.LaunchError) as ei:
        k(out, x)  # E:dyn-contract
    assert_diagnostic(ei.value, HERE, "E:dyn-contract", "needs 300 x f32 = 1200 bytes: more than the contract's "
                                                        "shared_memory=1024")
    assert torch.isnan(out).all()                # refused before any work


def test_a_dynamic_size_beyond_any_block_is_refused_at_launch():
    x, out = rows(1, 60000)
    with pytest.raises(ts.LaunchError) as ei:
        row_rotate.rotate_rows(out, x)  # E:dyn-device
    assert_diagnostic(ei.value, HERE, "E:dyn-device", "needs 60000 x f32 = 240000 bytes: more than a block can have")


def test_an_empty_dynamic_array_is_refused():
    @simt.kernel(contract=C64)
    def k(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: int):
        s = simt.shared((S,), ts.f32)
        for p in s.permits(simt.per_thread()):
            s[p] = 1.0
        simt.barrier()
        for p in out.permits(simt.per_thread()):
            out[p] = s.get(0, 0.0)
    with pytest.raises(ts.LaunchError) as ei:
        k(torch.empty(8), S=0)  # E:dyn-empty
    assert_diagnostic(ei.value, HERE, "E:dyn-empty", "is sized by `S` = 0; it needs at least one element")


def test_a_dynamic_array_of_rank_two_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=C64)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: int):
            s = simt.shared((S,
                             4), ts.f32)  # E:dyn-rank
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert "dynamic shared array `s` (sized by the launch-time `S`) must have rank 1" in ei.value.message
    assert ei.value.loc.line == marker_line(HERE, "E:dyn-rank") - 1        # at `S`


def test_two_dynamic_arrays_are_refused():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=C64)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: int, T: int):
            s = simt.shared((S,), ts.f32)
            t = simt.shared((T,), ts.f32)  # E:dyn-two
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:dyn-two", "a kernel has one dynamic shared array; `s` (line")


def test_a_float_size_is_not_a_dynamic_array():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=C64)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int, S: float):
            s = simt.shared((S,), ts.f32)  # E:dyn-float
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:dyn-float", "a shared array's shape must be a compile-time int")


def test_sanitize_takes_a_bool():
    with pytest.raises(ts.KernelError, match="sanitize= takes True or False, got 1"):
        simt.kernel(contract=C64, sanitize=1)(row_rotate.rotate_rows.fn)


def test_the_lowering_sizes_the_array_from_the_launch_and_shadows_it_when_sanitized():
    x, out = rows(2, 10)
    plain = row_rotate.rotate_rows.numba_source(out, x)
    assert "row = cuda.shared.array(0, __types.float32)[:S]" in plain and "row__w" not in plain
    checked = row_rotate.rotate_rows_checked.numba_source(out, x)
    assert "row__w = cuda.shared.array(0, __types.uint8)[(S * 4 + 15) // 16 * 16:" in checked
    assert "row__w[p__0] = 1" in checked
    assert "__lds1(row, row__w, (p__1 + 1) % S, __err" in checked
    assert row_rotate.rotate_rows_checked.has_checks


# -- the GPU ------------------------------------------------------------------------------------

gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("s", [1, 100, 256])
def test_gpu_dynamic_shared_rows_of_any_length(s):
    for kernel in (row_rotate.rotate_rows, row_rotate.rotate_rows_checked):
        x, out = rows(5, s, "cuda")
        kernel(out, x).sync()
        assert torch.equal(out, torch.roll(x, -1, dims=1))


@gpu
def test_gpu_a_dynamic_pool_above_48_kib_is_opted_in():
    s = 20000                                    # 80000 bytes of dynamic shared memory a block
    x, out = rows(3, s, "cuda")
    rotate_long(out, x, K=math.ceil(s / 64)).sync()
    assert torch.equal(out, torch.roll(x, -1, dims=1))


@gpu
def test_gpu_a_dynamic_size_beyond_the_device_is_refused_before_any_work():
    x, out = rows(1, 60000, "cuda")
    with pytest.raises(ts.LaunchError, match="more than a block"):
        row_rotate.rotate_rows(out, x)
    assert torch.isnan(out).all()


@gpu
def test_gpu_the_sanitizer_reports_a_shared_read_nobody_wrote_at_its_line():
    x, out = rows(2, 257, "cuda")
    with pytest.raises(ts.SanitizerError) as ei:
        row_rotate.rotate_rows_checked(out, x).sync()
    assert "read of shared memory nobody wrote" in ei.value.message
    assert ei.value.loc.line == line_of(row_rotate.__file__, "out[p] = row[")
    x, out = rows(2, 256, "cuda")                # the flag was cleared: a good launch passes
    row_rotate.rotate_rows_checked(out, x).sync()
    assert torch.equal(out, torch.roll(x, -1, dims=1))


@gpu
def test_gpu_the_sanitizer_sees_a_static_padding_column():
    x, out = torch.randn(4, 4, device="cuda"), torch.empty(4, 4, device="cuda")
    checked_tile(out, x).sync()
    torch.testing.assert_close(out, x.t(), rtol=0, atol=0)
    with pytest.raises(ts.SanitizerError) as ei:
        checked_tile(out, x, SHIFT=1).sync()
    assert ei.value.loc.line == marker_line(HERE, "E:pad-read")


@gpu
def test_gpu_a_get_of_a_shared_element_nobody_wrote_is_reported_at_its_line():
    out = torch.empty(64, device="cuda")
    get_past_the_written(out, S=32, W=32).sync()
    assert out.tolist() == [1.0] * 32 + [-1.0] * 32
    with pytest.raises(ts.SanitizerError) as ei:
        get_past_the_written(out, S=32, W=16).sync()
    assert ei.value.loc.line == marker_line(HERE, "E:get-unwritten")


@gpu
def test_gpu_shared_atomics_in_a_sanitized_kernel():
    x = torch.randint(0, 64, (64,), dtype=torch.int32, device="cuda")
    out = torch.full((64,), -1, dtype=torch.int32, device="cuda")
    shared_atomics_checked(out, x).sync()
    assert torch.equal(out, torch.bincount(x, minlength=64).int())
