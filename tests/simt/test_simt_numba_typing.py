"""The generated source of every example (and of the test kernels that use tables, warp
operations and unsafe writes) types and lowers to LLVM IR with numba-cuda's own CUDA target,
for the argument types a GPU launch passes. Only NVVM's PTX step, which needs the CUDA toolkit,
is left to the GPU machine. numba-cuda asks the current device for its compute capability when
it compiles a device function; with no GPU here it is told 9.0 (the H200's)."""
import math
import types

import pytest
import torch

import tilesafe as ts
from tilesafe.simt import gpu_launch
from tilesafe.simt.binding import bind
from tilesafe.simt.examples import (block_sum, histogram, row_rotate, sgemm, softmax_rows, top_p, transpose,
                                    transpose_half, vector_add)
from tilesafe.simt.lower_numba import written_targets
from tilesafe.simt.params import CONST
from tilesafe.simt.vector_access import intrinsics

numba_cuda = pytest.importorskip("numba_cuda", reason="numba-cuda (the `simt` extra) is not installed")


@pytest.fixture(scope="module")
def lower():
    from numba import cuda
    from numba.cuda import dispatcher
    from numba.cuda import types as nt
    from numba.cuda.compiler import compile_cuda
    real = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))

    def compile_for(kernel, *args, grid=None, **kwargs):
        bound = bind(kernel, args, kwargs, grid)
        argtypes = []
        for p in kernel.params:
            if p.is_tensor:
                f = bound.tensors[p.name]
                argtypes.append(gpu_launch.array_type(f.dtype, len(f.shape), f.tensor._torch().is_contiguous()))
            elif p.kind != CONST:
                argtypes.append(gpu_launch.scalar_type(p.dtype))
        argtypes.append(gpu_launch.array_type(ts.i32, 1, True))          # the error flag
        for name in written_targets(kernel.info):                          # an unsafe kernel's write masks
            argtypes.append(gpu_launch.array_type(ts.u8, len(bound.tensors[name].shape), True))
        name = f"simt_{kernel.name}"
        namespace = {"cuda": cuda, "math": math, "__types": nt, "__f32": nt.float32, **intrinsics(),
                     **kernel.table_globals()}
        exec(compile(kernel.source_for(bound.consts), f"<{name}>", "exec"), namespace)
        return compile_cuda(namespace[name], nt.void, tuple(argtypes), cc=(9, 0))
    yield compile_for
    dispatcher.get_current_device = real


def z(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


def test_the_examples_type_and_lower(lower):
    i32 = torch.int32
    lower(vector_add.vector_add, z(8), z(8), z(8))
    lower(vector_add.vector_add_chunked, z(8), z(8), z(8), K=4)
    lower(vector_add.vector_add_chunked, z(8), z(8), z(8), K=8)         # the loads-first fast path
    lower(vector_add.vector_add_runs, z(8), z(8), z(8), K=4)            # 128-bit loads and stores
    lower(histogram.histogram, z(4, dtype=i32), z(8, dtype=i32), grid=(1,))
    lower(histogram.histogram256, z(256, dtype=i32), z(8, dtype=i32), grid=(1,))
    lower(block_sum.block_sum, z(2), z(600), K=256)
    lower(block_sum.sum_all, z(1), z(600), grid=(2,))
    lower(softmax_rows.softmax_rows, z(3, 5), z(3, 5))
    lower(softmax_rows.softmax_rows_staged, z(3, 5), z(3, 5), K=2)
    lower(transpose.transpose, z(5, 3), z(3, 5))
    lower(transpose_half.transpose_pairs, z(6, 2, dtype=i32), z(4, 3, dtype=i32))    # int32 words: shifts, masks
    lower(transpose_half.transpose_halves, z(5, 3, dtype=torch.float16), z(3, 5, dtype=torch.float16))
    lower(sgemm.sgemm, z(3, 4), z(3, 5), z(5, 4))
    lower(top_p.top_p_sample, z(2, dtype=i32), z(2, 9), z(2, 9), 0.9)
    lower(vector_add.vector_add, z(8, 2)[:, 0], z(8), z(8))          # a strided output: layout 'A'


def test_tables_warp_operations_and_unsafe_writes_type_and_lower(lower):
    from test_simt_constant import lookup
    from test_simt_unsafe import count_into, scatter
    from test_simt_warp_ops import warp_ops
    lower(lookup, z(4), z(4, dtype=torch.int32))
    lower(warp_ops, z(64), z(64), z(64), z(64), z(64, dtype=torch.int64), z(64))
    lower(scatter, z(4), z(2, dtype=torch.int32), grid=(1,))
    lower(count_into, z(4, dtype=torch.int32), z(2, dtype=torch.int32), grid=(1,))


def test_a_ballot_is_typed_unsigned_so_lane_31_is_not_a_sign_bit(lower):
    # numba-cuda types ballot_sync as i32: stored into an i64 output it was sign-extended (off by
    # 2**32 wherever lane 31 voted, as the H200 found); CUDA's __ballot_sync is unsigned
    from test_simt_warp_ops import vote
    compiled = lower(vote, z(32, dtype=torch.int64), z(32))
    from numba.cuda import types as nt
    assert compiled.type_annotation.typemap["b"] == nt.uint32


def test_dynamic_shared_memory_and_the_shared_sanitizer_type_and_lower(lower):
    lower(row_rotate.rotate_rows, z(3, 100), z(3, 100))
    lower(row_rotate.rotate_rows_checked, z(3, 100), z(3, 100))       # shadow bits, checked reads
    from test_simt_dynamic_shared import checked_tile, get_past_the_written, shared_atomics_checked
    lower(get_past_the_written, z(64), S=32, W=16)                   # a dynamic array's shadow, a get
    lower(checked_tile, z(4, 4), z(4, 4))                             # rank-2 static shadow
    lower(shared_atomics_checked, z(64, dtype=torch.int32), z(64, dtype=torch.int32))


def test_a_run_walk_with_float_int_and_bool_scalars_types_and_lowers(lower):
    from test_simt_fast_paths import affine_run
    lower(affine_run, z(300), z(300), 0.5, 3, True, K=4)


def test_a_run_of_16_bytes_is_one_vector_load_per_input_and_one_vector_store(lower):
    compiled = lower(vector_add.vector_add_runs, z(8), z(8), z(8), K=4)
    ir = compiled.library.get_llvm_str()
    assert ir.count("load <4 x float>") == 2 and "align 16" in ir, ir[-4000:]
    assert ir.count("store <4 x float>") == 1
    halves = lower(vector_add.vector_add_runs, z(8), z(8), z(8), K=2)      # 8 bytes: the scalar path only
    assert "<4 x float>" not in halves.library.get_llvm_str()


def test_a_checked_read_is_one_unsigned_compare(lower):
    # `0 <= i < n` as numba writes it is two signed compares and an `and` a read, which sum_all's
    # eight-wide loop paid on every element (session 17: 10 PTX instructions a read against raw's 7)
    ir = lower(histogram.histogram, z(4, dtype=torch.int32), z(8, dtype=torch.int32), grid=(1,)).library.get_llvm_str()
    assert ir.count("icmp ult i64") >= 2 and "icmp sge i64" not in ir, ir[-3000:]     # old: sge, no ult


def test_masks_and_shifts_for_power_of_two_mods_type_and_lower(lower):
    from test_simt_pow2_index import mods
    lower(mods, z(40), z(40), S=7, C=4)


def test_sum_all_reads_runs_of_four_as_one_vector_load_each(lower):
    ir = lower(block_sum.sum_all, z(1), z(600), grid=(2,)).library.get_llvm_str()
    assert "load <4 x float>" in ir and "align 16" in ir, ir[-3000:]


def test_every_shared_memory_example_sanitized_types_and_lowers(lower):
    from tilesafe import simt

    def sanitized(k):
        return simt.kernel(contract=k.contract, sanitize=True)(k.fn)
    i32 = torch.int32
    lower(sanitized(histogram.histogram256), z(256, dtype=i32), z(8, dtype=i32), grid=(1,))   # shared atomics
    lower(sanitized(block_sum.block_sum), z(2), z(600), K=256)
    lower(sanitized(block_sum.sum_all), z(1), z(600), grid=(2,))
    lower(sanitized(softmax_rows.softmax_rows), z(3, 5), z(3, 5))
    lower(sanitized(softmax_rows.softmax_rows_staged), z(3, 5), z(3, 5), K=2)
    lower(sanitized(transpose_half.transpose_pairs), z(6, 2, dtype=i32), z(4, 3, dtype=i32))
    lower(sanitized(transpose.transpose), z(5, 3), z(3, 5))                                   # a padded 2-D tile
    lower(sanitized(sgemm.sgemm), z(3, 4), z(3, 5), z(5, 4))
    lower(sanitized(top_p.top_p_sample), z(2, dtype=i32), z(2, 9), z(2, 9), 0.9)


def test_runs_of_16_bytes_in_other_dtypes_vectorise_too(lower):
    from tilesafe import simt

    # (numba keeps f16 in memory as i16)
    for dtype, k, vector in ((ts.f64, 2, "<2 x double>"), (ts.f16, 8, "<8 x i16>"), (ts.i32, 4, "<4 x i32>")):
        @simt.kernel(contract=simt.Contract(block=(64,)))
        def scale(out: simt.Disjoint[dtype, ("N",)], x: simt.Ref[dtype, ("N",)], N: int, K: simt.Const[int]):
            for p in out.permits(simt.run(K)):
                out[p] = x[p] + x[p]
        t = getattr(torch, {"f64": "float64", "f16": "float16", "i32": "int32"}[dtype.name])
        ir = lower(scale, z(16, dtype=t), z(16, dtype=t), K=k).library.get_llvm_str()
        assert f"load {vector}" in ir and f"store {vector}" in ir, (dtype.name, ir[-3000:])


def test_permit_writes_and_proven_reads_take_any_number_or_bool_and_need_no_wraparound(lower):
    from tilesafe import simt

    @simt.kernel(contract=simt.Contract(block=(64,)))
    def positive(out: simt.Disjoint[ts.i32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
        for p in out.permits(simt.per_thread()):
            out[p] = x[p] > 0              # a bool into an i32 output, through __put1
    ir = lower(positive, z(8, dtype=torch.int32), z(8)).library.get_llvm_str()
    assert "__put1" in positive.numba_source(z(8, dtype=torch.int32), z(8))
    assert "store i32" in ir

    @simt.kernel(contract=simt.Contract(block=(8, 8)))
    def halve(out: simt.Disjoint[ts.f16, ("R", "C")], x: simt.Ref[ts.f16, ("R", "C")], R: int, C: int):
        for p in out.permits(simt.chunk(2)):
            out[p] = x[p] * 0.5            # f16 in, an f32 product, stored back as f16
    lower(halve, z(5, 9, dtype=torch.float16), z(5, 9, dtype=torch.float16))
