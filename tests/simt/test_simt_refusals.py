"""The SIMT route's negative corpus (issue 18, "Bad input"): each case asserts the error class,
a fragment of the message, and the source line it points at (the line marked `# E:<name>`)."""
import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt import contract as simt_contract
from tilesafe.simt.examples.vector_add import vector_add

HERE = __file__
BLOCK = simt.Contract(block=(64,))


def test_writing_an_input():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                x[p] = 1.0  # E:write-input
    assert_diagnostic(ei.value, HERE, "E:write-input", "cannot write `x`: it is a read-only input (simt.Ref)")


def test_writing_an_output_through_a_computed_index():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
            i = simt.global_id()
            out[i + 1] = x[i]  # E:computed-index
    assert_diagnostic(ei.value, HERE, "E:computed-index", "cannot write `out` through a computed index")


def test_permits_from_thread_div_two_overlap():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.at(simt.global_id() // 2)):  # E:overlap
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:overlap", "overlap: two threads may hold permits to the same element")


def test_an_injective_custom_mapping_is_accepted():
    @simt.kernel(contract=BLOCK)
    def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
        for p in out.permits(simt.at(simt.global_id() * 2 + 1)):   # odd elements only
            out[p] = 7.0
    out = torch.zeros(9)
    k(out).sync()
    assert out.tolist() == [0, 7, 0, 7, 0, 7, 0, 7, 0]


def test_a_permit_copied_into_a_variable():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                q = p  # E:copied
                out[q] = 1.0
    assert_diagnostic(ei.value, HERE, "E:copied", "a permit cannot be copied into `q`")


def test_a_permit_used_after_its_loop():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
            out[p] = 2.0  # E:after-loop
    assert_diagnostic(ei.value, HERE, "E:after-loop", "permit `p` is used after its loop ended")


def test_a_permit_of_another_output():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], other: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in other.permits(simt.per_thread()):
                out[p] = 1.0  # E:brand
    assert_diagnostic(ei.value, HERE, "E:brand", "permit `p` belongs to `other`, not `out`")


def test_reading_shared_memory_before_the_barrier():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
            s = simt.shared((64,), ts.f32)
            for p in s.permits(simt.per_thread()):
                s[p] = x.get(simt.global_id(), 0.0)
            v = s[63 - simt.thread_id()]  # E:early-read
            for p in out.permits(simt.per_thread()):
                out[p] = v
    assert_diagnostic(ei.value, HERE, "E:early-read", "read of shared array `s` before a barrier")


def test_writing_shared_memory_after_reads_in_the_same_phase():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((64,), ts.f32)
            for p in s.permits(simt.per_thread()):
                s[p] = 1.0
            simt.barrier()
            v = s[63 - simt.thread_id()]
            for p in s.permits(simt.per_thread()):
                s[p] = v  # E:write-after-read
            for p in out.permits(simt.per_thread()):
                out[p] = v
    assert_diagnostic(ei.value, HERE, "E:write-after-read", "write to shared array `s` after reads of it")


def test_a_barrier_inside_a_thread_dependent_branch():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            if simt.thread_id() < 16:
                simt.barrier()  # E:divergent-barrier
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:divergent-barrier", "simt.barrier() under thread-dependent control flow")


def test_a_barrier_after_a_value_that_became_thread_dependent_in_a_loop():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            n = 0
            for i in range(4):
                if n > 2:
                    simt.barrier()  # E:loop-carried
                n = n + simt.thread_id()
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:loop-carried", "simt.barrier() under thread-dependent control flow")


def test_a_warp_shuffle_under_divergence():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            v = 1.0
            if simt.lane() < 8:
                v = simt.shfl_down(v, 1)  # E:divergent-shuffle
            for p in out.permits(simt.per_thread()):
                out[p] = v
    assert_diagnostic(ei.value, HERE, "E:divergent-shuffle", "warp operation simt.shfl_down() under thread-dependent")


def test_a_warp_operation_needs_whole_warps():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=simt.Contract(block=(48,)))
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            v = simt.warp_sum(1.0)  # E:partial-warp
            for p in out.permits(simt.per_thread()):
                out[p] = v
    assert_diagnostic(ei.value, HERE, "E:partial-warp", "needs a block size that is a multiple of 32")


def test_shared_memory_larger_than_the_contract():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=simt.Contract(block=(64,), shared_memory=1024))
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((512,), ts.f32)  # E:shared-contract
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:shared-contract", "2048 bytes of shared memory, more than the contract's")


def test_shared_memory_larger_than_the_device():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((128, 128), ts.f32)  # E:shared-device
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:shared-device", "more than the device's static limit of 49152 bytes")


def test_a_block_shape_that_breaks_the_contract():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=simt.Contract(block=(64, 32)))  # E:block
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:block", "has 2048 threads; a block holds at most 1024")


def test_a_mapping_whose_rank_does_not_fit_the_block():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("R", "C")], R: int, C: int):
            for p in out.permits(simt.per_thread()):  # E:rank
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:rank", "simt.per_thread() over rank-2 `out` needs a rank-2 block")


def test_shared_memory_walked_like_a_global_output():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((64,), ts.f32)
            for p in s.permits(simt.grid_stride()):  # E:shared-as-global
                s[p] = 1.0
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:shared-as-global",
                      "shared array `s` takes per_thread, run, chunk or per_warp permits (within the block)")


def test_shared_atomics_in_the_phase_of_the_initial_writes():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((64,), ts.f32)
            for p in s.permits(simt.per_thread()):
                s[p] = 0.0
            s.add(simt.lane(), 1.0)  # E:atomic-early
            simt.barrier()
            for p in out.permits(simt.per_thread()):
                out[p] = s[simt.thread_id()]
    assert_diagnostic(ei.value, HERE, "E:atomic-early", "atomic update of shared array `s` in the phase it is written")


def test_reading_shared_memory_in_the_phase_of_its_atomics():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((64,), ts.f32)
            for p in s.permits(simt.per_thread()):
                s[p] = 0.0
            simt.barrier()
            s.add(simt.lane(), 1.0)
            v = s[simt.thread_id()]  # E:read-in-atomic-phase
            for p in out.permits(simt.per_thread()):
                out[p] = v
    assert_diagnostic(ei.value, HERE, "E:read-in-atomic-phase",
                      "read of shared array `s` before a barrier: it is updated")


def test_shared_memory_used_as_a_value():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((64,), ts.f32)
            t = s  # E:shared-value
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:shared-value", "shared array `s` cannot be used as a value")


def test_an_atomic_target_is_not_readable():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], h: simt.Atomic[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = h[p]  # E:atomic-read
    assert_diagnostic(ei.value, HERE, "E:atomic-read", "cannot read `h`: it is an atomic target")


def test_a_grid_that_does_not_cover_the_output():
    x, y, out = torch.ones(600), torch.ones(600), torch.full((600,), float("nan"))
    with pytest.raises(ts.LaunchError) as ei:
        vector_add.launch(out, x, y, grid=(2,))  # E:grid
    assert_diagnostic(ei.value, HERE, "E:grid", "grid (2, 1, 1) does not cover the outputs of `vector_add` exactly")
    assert torch.isnan(out).all()    # refused before any work: nothing was written


def test_an_output_aliasing_an_input():
    x = torch.ones(512)
    with pytest.raises(ts.AliasError) as ei:
        vector_add(x, x, torch.ones(512))  # E:alias
    assert_diagnostic(ei.value, HERE, "E:alias", "output `out` of `vector_add` shares memory with argument `x`")


def test_a_contract_for_capability_ten_launched_on_nine():
    contract = simt.Contract(block=(128,), capability=(10, 0))
    loc = ts.errors.Loc(HERE, 1)
    with pytest.raises(ts.LaunchError) as ei:
        simt_contract.check_capability(contract, (9, 0), "cuda:0", loc)
    assert "needs compute capability 10.0, but cuda:0 has 9.0" in ei.value.message
    simt_contract.check_capability(contract, (10, 0), "cuda:0", loc)    # enough: no error


def test_a_warp_operation_in_a_conditional_expression_is_divergent():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            v = simt.warp_sum(1.0) if simt.lane() < 4 else 0.0  # E:ifexp-warp
            for p in out.permits(simt.per_thread()):
                out[p] = v
    assert_diagnostic(ei.value, HERE, "E:ifexp-warp", "warp operation simt.warp_sum() under thread-dependent")


def test_a_warp_operation_behind_and_is_divergent():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            v = simt.lane() < 4 and simt.ballot(True) > 0  # E:and-warp
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0 if v else 0.0
    assert_diagnostic(ei.value, HERE, "E:and-warp", "warp operation simt.ballot() under thread-dependent")


@simt.kernel(contract=BLOCK)
def strided(out: simt.Disjoint[ts.f32, ("N",)], N: int, K: simt.Const[int]):
    for p in out.permits(simt.at(simt.global_id() * K)):
        out[p] = 1.0


def test_a_const_that_makes_a_custom_mapping_overlap_is_refused_at_launch():
    out = torch.full((8,), float("nan"))
    with pytest.raises(ts.LaunchError) as ei:
        strided(out, K=0)  # E:const-overlap
    assert_diagnostic(ei.value, HERE, "E:const-overlap", "which does not give each thread its own elements")
    assert torch.isnan(out).all()
    strided(out, K=2).sync()
    assert out[0::2].tolist() == [1.0] * 4


def test_a_permit_stored_into_memory():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = p  # E:stored
    assert_diagnostic(ei.value, HERE, "E:stored", "permit `p` can only index its target")


def test_a_permit_passed_to_a_call():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = abs(p)  # E:passed
    assert_diagnostic(ei.value, HERE, "E:passed", "permit `p` can only index its target")


def test_a_barrier_inside_a_permits_walk():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                simt.barrier()  # E:barrier-in-walk
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:barrier-in-walk", "simt.barrier() inside a permits walk")


def test_a_barrier_in_a_loop_with_thread_dependent_bounds():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for i in range(simt.thread_id()):
                simt.barrier()  # E:varying-loop
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:varying-loop", "simt.barrier() under thread-dependent control flow")


def test_shared_memory_written_by_two_walks_in_one_phase():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            s = simt.shared((128,), ts.f32)
            for p in s.permits(simt.per_thread()):
                s[p] = 1.0
            for q in s.permits(simt.run(2)):
                s[q] = 2.0  # E:two-walks
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:two-walks", "shared array `s` is written by two walks in one phase")


def test_an_output_walked_twice():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
            for q in out.permits(simt.grid_stride()):  # E:walked-twice
                out[q] = 2.0
    assert_diagnostic(ei.value, HERE, "E:walked-twice", "`out` is walked twice")


def test_a_return_in_a_kernel():
    with pytest.raises(ts.KernelError) as ei:
        @simt.kernel(contract=BLOCK)
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            if simt.thread_id() > 5:
                return  # E:return
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
    assert_diagnostic(ei.value, HERE, "E:return", "SIMT kernels do not return")
