"""The lowering's fast paths and the examples built on them: a run/chunk walk with one write
loads its whole run before storing it (the ragged last run keeps the guarded loop), and the
whole-tensor sum with one atomic per block. CPU tests check the results on the executor and the
generated source; GPU tests (marked gpu) the same kernels through numba-cuda and the driver
launch, with int, float and bool scalar arguments."""
import pytest
import torch

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt.examples import block_sum, vector_add

C64 = simt.Contract(block=(64,))


@simt.kernel(contract=C64)
def affine_run(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], a: float, shift: int,
               negate: bool, N: int, K: simt.Const[int]):
    for p in out.permits(simt.run(K)):             # K consecutive elements a thread
        out[p] = (-(a * x[p]) if negate else a * x[p]) + shift + p[0]


def oracle(x, a, shift, negate):
    y = a * x.double()
    return ((-y if negate else y) + shift + torch.arange(x.numel(), dtype=torch.float64, device=x.device)).float()


def body(kernel, *args, **kwargs):
    source = kernel.numba_source(*args, **kwargs)
    return source[source.index(f"def simt_{kernel.name}"):]


def check_vector_add(kernel, n, ks):
    """`kernel` adds x and y into a poisoned `out` for every run length in `ks`."""
    x, y = torch.randn(n), torch.randn(n)
    for k in ks:
        out = torch.full((n,), float("nan"))
        kernel(out, x, y, K=k).sync()
        assert torch.equal(out, x + y)


@pytest.mark.parametrize("n", [1, 255, 2048, 2049])
def test_chunked_vector_add_with_full_and_ragged_runs(n):
    check_vector_add(vector_add.vector_add_chunked, n, (4, 8))


@pytest.mark.parametrize("n", [1, 1023, 1024, 5000])
def test_vector_add_in_runs(n):
    check_vector_add(vector_add.vector_add_runs, n, (2, 4))


def test_a_run_of_16_bytes_reads_and_writes_through_vectors_where_aligned():
    text = body(vector_add.vector_add_runs, torch.empty(8), torch.ones(8), torch.ones(8), K=4)
    assert "__addr(out) % 16 == 0 and out.strides[0] == 4" in text
    assert text.count("= __vld4(") == 2 and text.count("__vst4(out, ") == 1
    misread = body(affine_run, torch.empty(8), torch.ones(8), 1.0, 0, False, K=4)
    assert "__vld4(x, " in misread                  # x[p] is proven: vectorised; p[0] stays a coordinate


def test_a_run_walk_with_scalars_of_every_kind():
    x = torch.randn(300)
    for negate in (False, True):
        out = torch.full((300,), float("nan"))
        affine_run(out, x, 0.5, 3, negate, K=4).sync()
        torch.testing.assert_close(out, oracle(x, 0.5, 3, negate))


def test_the_fast_path_loads_the_whole_run_before_storing_it():
    text = body(vector_add.vector_add_chunked, torch.empty(8), torch.ones(8), torch.ones(8), K=4)
    fast = text[:text.index("else:")]
    loads = [i for i, line in enumerate(fast.splitlines()) if "= __at1(x, " in line]
    stores = [i for i, line in enumerate(fast.splitlines()) if line.strip().startswith("__put1(out, ")]
    assert len(loads) == 4 and len(stores) == 4 and max(loads) < min(stores)
    assert "for __j1 in range(4):" in text[text.index("else:"):]        # the ragged run: the guarded loop
    one = body(vector_add.vector_add, torch.empty(8), torch.ones(8), torch.ones(8))
    assert "else:" not in one                                            # per_thread: nothing to hoist


def test_sum_all_is_one_atomic_per_block():
    for n, blocks in ((1, 2), (1000, 2), (5000, 3)):
        x = torch.randn(n)
        total = torch.full((1,), 2.0)
        block_sum.launch_sum(total, x, blocks=blocks).sync()
        torch.testing.assert_close(total, (x.double().sum() + 2.0).float().reshape(1), rtol=1e-5, atol=1e-4)
    text = body(block_sum.sum_all, torch.zeros(1), torch.ones(10), grid=(2,))
    assert text.count("__atomic_add(") == 1 and "if cuda.threadIdx.x == 0:" in text


# -- the GPU ------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, (1 << 22) + 3])
def test_gpu_chunked_vector_add(n):
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    for k in (4, 8):
        out = torch.full((n,), float("nan"), device="cuda")
        vector_add.vector_add_chunked(out, x, y, K=k).sync()
        assert torch.equal(out, x + y)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 1024, (1 << 22) + 3])
def test_gpu_vector_add_in_runs_aligned_and_not(n):
    base_x, base_y = torch.randn(n + 1, device="cuda"), torch.randn(n + 1, device="cuda")
    for x, y in ((base_x[:n], base_y[:n]), (base_x[1:], base_y[1:])):    # 16-byte aligned, then 4 bytes off
        for k in (2, 4):
            out = torch.full((n,), float("nan"), device="cuda")
            vector_add.vector_add_runs(out, x, y, K=k).sync()
            assert torch.equal(out, x + y)
    out = torch.full((n + 1,), float("nan"), device="cuda")[1:]          # the output off, inputs aligned
    vector_add.vector_add_runs(out, base_x[:n], base_y[:n], K=4).sync()
    assert torch.equal(out, base_x[:n] + base_y[:n])


@pytest.mark.gpu
def test_gpu_scalar_arguments_of_every_kind_reach_the_kernel():
    x = torch.randn(1000, device="cuda")
    for negate in (False, True):
        for _ in range(2):                           # the first launch, then the lean repeated one
            out = torch.full((1000,), float("nan"), device="cuda")
            affine_run(out, x, 0.5, -7, negate, K=4).sync()
            torch.testing.assert_close(out, oracle(x, 0.5, -7, negate))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, (1 << 24) + 5])
def test_gpu_sum_all(n):
    x = torch.randn(n, device="cuda")
    total = torch.zeros(1, device="cuda")
    block_sum.launch_sum(total, x).sync()
    want = x.double().sum().float()
    torch.testing.assert_close(total[0], want, rtol=1e-4, atol=1e-2)
