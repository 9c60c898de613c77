"""Session 17's SIMT forms on the GPU, against torch: the 16-bit transpose that moves int32 words
(integer shifts and masks in 64 bits, the low 32 stored, as the CPU executor now computes them),
the row softmax staged in shared memory, and sum_all's runs of 4 (`x.run(i, 4)`: 128-bit loads when
aligned). Run with `pytest -m gpu`."""
import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples import block_sum, softmax_rows, transpose_half

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 2), (70, 36), (1000, 3002), (4096, 2048)])
def test_transpose_f16_through_words(dtype, shape):
    x = torch.randn(*shape, device="cuda").to(dtype)
    out = torch.full((shape[1], shape[0]), float("nan"), device="cuda", dtype=dtype)
    transpose_half.transpose_f16(out, x).sync()
    assert torch.equal(out, x.t())


@pytest.mark.parametrize("shape", [(9, 70), (1001, 333)])
def test_transpose_f16_with_an_odd_extent_moves_halves(shape):
    x = torch.randn(*shape, device="cuda").half()
    out = torch.full((shape[1], shape[0]), float("nan"), device="cuda", dtype=torch.float16)
    transpose_half.transpose_f16(out, x).sync()
    assert torch.equal(out, x.t())


@simt.kernel(contract=simt.Contract(block=(32,)))
def bits(out: simt.Disjoint[ts.i32, ("N",)], x: simt.Ref[ts.i32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = ((x[p] >> 16) & 0xFFFF) | (x[p] & 0xFFFF0000) | (p[0] << 31)


def test_integer_masks_and_shifts_match_the_cpu_executor():
    x = torch.tensor([-1, 0x12345678, -0x7FFF0000, 5], dtype=torch.int32)
    cpu = torch.zeros(4, dtype=torch.int32)
    bits(cpu, x).sync()
    gpu = torch.zeros(4, dtype=torch.int32, device="cuda")
    bits(gpu, x.cuda()).sync()
    w = x.numpy().astype(np.int64)
    want = (((w >> 16) & 0xFFFF) | (w & 0xFFFF0000) | (np.arange(4) << 31)).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(gpu.cpu().numpy(), want)
    assert torch.equal(gpu.cpu(), cpu)


@pytest.mark.parametrize("shape", [(7, 33), (1000, 4096), (64, 5000)])
def test_softmax_rows_staged(shape):
    x = torch.randn(*shape, device="cuda") * 3
    out = torch.full(shape, float("nan"), device="cuda")
    softmax_rows.softmax_staged(out, x).sync()
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-5)
    out.fill_(float("nan"))
    softmax_rows.softmax_rows_staged(out, x, K=2).sync()       # 512 columns staged, the rest read from x
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [5, 1000, (1 << 22) + 3])
def test_sum_all_reads_runs_aligned_and_not(n):
    base = torch.randn(n + 1, device="cuda")
    for x in (base[:n], base[1:]):                   # 16-byte aligned (128-bit loads), then 4 bytes off (scalar)
        total = torch.zeros(1, device="cuda")
        block_sum.launch_sum(total, x).sync()
        torch.testing.assert_close(total[0], x.double().sum().float(), rtol=1e-4, atol=1e-2)


def _line(marker: str) -> int:
    """The line of this file that ends with `# marker`."""
    with open(__file__) as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


@simt.kernel(contract=simt.Contract(block=(32,)))
def floor_ops(out: simt.Disjoint[ts.i64, ("N",)], N: int, S: int):
    for p in out.permits(simt.per_thread()):
        d = p[0] - S                        # negative for p[0] < S: the & and >> lowering must floor
        out[p] = (d % 8) * 1000000 + (d // 4) * 1000 + d % 64 // 2


def test_power_of_two_mods_and_divisions_floor_negative_ints():
    d = np.arange(200, dtype=np.int64) - 100
    want = (d % 8) * 1000000 + (d // 4) * 1000 + d % 64 // 2
    gpu = torch.full((200,), -7, dtype=torch.int64, device="cuda")
    floor_ops(gpu, S=100).sync()
    np.testing.assert_array_equal(gpu.cpu().numpy(), want)
    cpu = torch.full((200,), -7, dtype=torch.int64)
    floor_ops(cpu, S=100).sync()
    assert torch.equal(gpu.cpu(), cpu)


@simt.kernel(contract=simt.Contract(block=(32,)))
def shifted_reads(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("M",)], N: int, M: int, D: int, E: int):
    for p in out.permits(simt.per_thread()):
        a, b, c, e = x.run(4 * p[0] - D, 4)  # E:gpu-run
        v = x.get(p[0] - D, 100.0)          # a negative index reads the default
        out[p] = a + b + c + e + v + x[p[0] - E]  # E:gpu-read


@pytest.mark.parametrize("start", [0, 1])          # x 16-byte aligned (128-bit runs), then 4 bytes off
def test_negative_indices_fail_the_unsigned_checks(start):
    base = torch.randn(40, device="cuda")
    x = base[start:start + 32]
    m = x.cpu().numpy().astype(np.float64)
    out = torch.full((8,), float("nan"), device="cuda")
    shifted_reads(out, x, D=0, E=0).sync()
    i = np.arange(8)
    want = m[4 * i] + m[4 * i + 1] + m[4 * i + 2] + m[4 * i + 3] + m[i] + m[i]
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    for d, e, marker in [(4, 0, "E:gpu-run"), (1, 0, "E:gpu-run"), (0, 1, "E:gpu-read")]:
        with pytest.raises(ts.SanitizerError, match="a bounds check in `shifted_reads` failed on the GPU") as ei:
            shifted_reads(out, x, D=d, E=e).sync()
        assert ei.value.loc.line == _line(marker), (d, e)
        with pytest.raises(ts.SanitizerError, match="out-of-bounds read of `x`") as ei:
            shifted_reads(torch.zeros(8), x.cpu(), D=d, E=e).sync()    # the CPU executor agrees
        assert ei.value.loc.line == _line(marker), (d, e)
    shifted_reads(out, x, D=0, E=0).sync()              # the flag was cleared: a good launch passes


@simt.kernel(contract=simt.Contract(block=(32,)))
def bool_index(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = x[p[0] > 3]                 # a bool index is 0 or 1 (the unsigned check types it too)


def test_a_bool_index_reads_element_0_or_1():
    out = torch.full((8,), float("nan"), device="cuda")
    bool_index(out, torch.arange(8.0, device="cuda")).sync()
    assert out.tolist() == [0.0] * 4 + [1.0] * 4
