"""Negative tests for the rules checked on a kernel's code (S1, S2, S3, S4) and for syntax
the kernel language does not support. Each asserts the error class, a fragment of the
message, the reported line (the line marked `# E:<name>`), and the diagnostic's shape."""
import numpy as np
import pytest
from lang_helpers import assert_diagnostic, launch, rand

import tilesafe as ts

HERE = __file__
CAPTURED = ts.tensor(np.arange(16, dtype=np.float32))
CAPTURED_NP = np.arange(16, dtype=np.float32)
SCALE = 3            # module-level ints are compile-time constants: capturing them is fine


# --- S1: outputs are written only at their own tile or at minted indices ------------------
def test_mut_tiles_store_with_a_forged_tuple_index():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (16, 16)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
            for idx in z.tiles():
                t = ts.load(x, idx, shape=(16, 16))
                z.store(t, (idx[0], idx[1]))  # E:forged-tuple
    assert_diagnostic(ei.value, HERE, "E:forged-tuple", "can only be indexed by an index minted by")


def test_mut_tiles_store_with_an_index_minted_by_another_output():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (16,)], w: ts.MutTiles[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            for idx in w.tiles():
                w.store(ts.load(x, idx, shape=(16,)), idx)
                z.store(ts.load(x, idx, shape=(16,)), idx)  # E:other-brand
    assert_diagnostic(ei.value, HERE, "E:other-brand", "minted by `w.tiles()` and cannot index `z`")


def test_mut_store_with_an_index_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            z.store(ts.load_tile_like(x, z), ts.block_id(0) + 1)  # E:mut-index
    assert_diagnostic(ei.value, HERE, "E:mut-index", "can only be indexed by an index minted by")


def test_subtile_index_of_another_output_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], w: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            for j in w.subtiles((8,)):
                z.store(ts.zeros((8,), ts.f32), j)  # E:sub-brand
    assert_diagnostic(ei.value, HERE, "E:sub-brand", "minted by `w.subtiles()` and cannot index `z`")


def test_mut_tiles_store_without_an_index():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (16,)]):
            z.store(ts.zeros((16,), ts.f32))  # E:no-index
    assert_diagnostic(ei.value, HERE, "E:no-index", "store at an index minted by its walk")


def test_two_walks_of_one_output():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (16,)]):
            for idx in z.tiles():
                z.store(ts.zeros((16,), ts.f32), idx)
            for idx in z.tiles(group=2):  # E:two-walks
                z.store(ts.full((16,), 1.0, ts.f32), idx)
    assert_diagnostic(ei.value, HERE, "E:two-walks", "is already walked at line")


def test_walk_nested_in_a_loop():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.MutTiles[ts.f32, (16,)], n: int):
            for r in range(n):
                for idx in z.tiles():  # E:nested-walk
                    z.store(ts.zeros((16,), ts.f32), idx)
    assert_diagnostic(ei.value, HERE, "E:nested-walk", "cannot be nested inside another loop")


def test_rebinding_a_ref_name_does_not_make_it_writable():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            y = x
            t = ts.load_tile_like(y, z)
            y.store(t)  # E:rebound-ref
    assert_diagnostic(ei.value, HERE, "E:rebound-ref", "cannot store to `x`: it is a read-only input")


def test_rebinding_a_ref_name_through_a_helper_does_not_make_it_writable():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            x, z2 = z, x
            z2.store(ts.load_tile_like(z2, x))  # E:swapped-ref
    assert_diagnostic(ei.value, HERE, "E:swapped-ref", "read-only input")


# --- S2: a Ref is never written; no captured tensors ---------------------------------------------
def test_store_to_a_ref():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
            x.store(ts.load_tile_like(x, z))  # E:store-ref
    assert_diagnostic(ei.value, HERE, "E:store-ref", "cannot store to `x`: it is a read-only input (ts.Ref)")
    assert ei.value.loc.col == 13 and ei.value.loc.width == len("x.store")


def test_capturing_a_module_level_tensor():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            z.store(ts.load(CAPTURED, (0,), shape=(16,)))  # E:capture-module
    assert_diagnostic(ei.value, HERE, "E:capture-module", "captures the tensor `CAPTURED`")


def test_capturing_a_closure_tensor_or_array():
    local = ts.tensor(np.ones(16, np.float32) * 2)
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            z.store(ts.load(local, (0,), shape=(16,)))  # E:capture-closure
    assert_diagnostic(ei.value, HERE, "E:capture-closure", "captures the tensor `local`")
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k2(z: ts.Mut[ts.f32, (16,)]):
            z.store(ts.zeros((16,), ts.f32) + CAPTURED_NP)  # E:capture-numpy
    assert_diagnostic(ei.value, HERE, "E:capture-numpy", "captures the tensor `CAPTURED_NP`")


def test_capturing_module_constants_is_fine(backend):
    @ts.kernel
    def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        z.store(ts.load_tile_like(x, z) * SCALE)
    x = rand(np.random.default_rng(90), 20, "f32")
    assert np.array_equal(launch(k, ts.empty(20), (16,), ts.tensor(x)), x * np.float32(3))


def test_atomic_on_a_ref_in_an_unsafe_kernel():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel(unsafe=True)
        def k(p: ts.Ptr[ts.f32], x: ts.Ref[ts.f32, ("N",)], N: int):
            ts.atomic_add(x, ts.arange(0, 16), 1.0)  # E:atomic-ref
    assert_diagnostic(ei.value, HERE, "E:atomic-ref", "`x` is a read-only input (ts.Ref)")


# --- S3: shapes, ranks and dtypes are consistent -----------------------------------------------
def test_mixing_float_dtypes_needs_astype():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f16, ("N",)], N: int):
            a = ts.load_tile_like(x, z)
            b = ts.load_tile_like(y, z)
            z.store(a + b)  # E:mix
    assert_diagnostic(ei.value, HERE, "E:mix", "cannot mix f32 and f16 implicitly")
    assert "ts.astype" in ei.value.help


def test_mixing_float_dtypes_in_mma():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16, 16)], x: ts.Ref[ts.bf16, ("N", "N")], y: ts.Ref[ts.f16, ("N", "N")], N: int):
            z.store(ts.dot(ts.load(x, (0, 0), shape=(16, 16)), ts.load(y, (0, 0), shape=(16, 16))))  # E:mma-dtypes
    assert_diagnostic(ei.value, HERE, "E:mma-dtypes", "operands must have one dtype")


def test_mma_inner_dimension_mismatch():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (32, 16)], a: ts.Ref[ts.f32, ("M", "K")], b: ts.Ref[ts.f32, ("K", "N")],
              M: int, N: int, K: int):
            acc = ts.zeros((32, 16), ts.f32)
            acc = ts.mma(ts.load(a, (0, 0), shape=(32, 32)), ts.load(b, (0, 0), shape=(16, 16)), acc)  # E:inner
            z.store(acc)
    assert_diagnostic(ei.value, HERE, "E:inner", "inner dimensions differ")


def test_non_power_of_two_tile_in_zeros():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            t = ts.zeros((24,), ts.f32)  # E:zeros-24
            z.store(t)
    assert_diagnostic(ei.value, HERE, "E:zeros-24", "not a power of two")
    assert "32" in ei.value.help


def test_non_power_of_two_tile_in_a_device_partition():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            px = x.partition((12,))  # E:part-12
            z.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:part-12", "not a power of two")


def test_non_power_of_two_output_tile_annotation():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (48,)]):  # E:annot-48
            z.store(ts.zeros((48,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:annot-48", "not a power of two")


def test_non_power_of_two_host_partition():
    z = ts.empty(100)
    with pytest.raises(ts.LaunchError, match="not a positive power of two"):
        z.partition((24,))
    z.partition((32,)).unpartition()   # the refused partition did not lend z


def test_const_tile_that_is_not_a_power_of_two_is_refused_at_specialization():
    @ts.kernel
    def k(z: ts.Mut[ts.f32, (16,)], B: ts.Const[int]):
        t = ts.zeros((B, 16), ts.f32)  # E:const-pow2
        z.store(ts.sum(t, axis=0))
    with pytest.raises(ts.KernelError) as ei:
        k(ts.empty(16).partition((16,)), B=6)
    assert_diagnostic(ei.value, HERE, "E:const-pow2", "not a power of two")


def test_store_of_the_wrong_dtype_or_shape():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f16, ("N",)], N: int):
            z.store(ts.load_tile_like(x, z))  # E:store-dtype
    assert_diagnostic(ei.value, HERE, "E:store-dtype", "cannot store a f16 tile to `z` (f32)")
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k2(z: ts.Mut[ts.f32, (16,)]):
            z.store(ts.zeros((32,), ts.f32))  # E:store-shape
    assert_diagnostic(ei.value, HERE, "E:store-shape", "the stored tile is f32[32]")


def test_shapes_that_do_not_broadcast():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16, 16)]):
            z.store(ts.zeros((16, 16), ts.f32) + ts.zeros((8, 1), ts.f32))  # E:broadcast
    assert_diagnostic(ei.value, HERE, "E:broadcast", "do not broadcast")


def test_carried_value_changes_type_in_a_loop():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], n: int):
            acc = ts.zeros((16,), ts.f32)
            for i in range(n):  # E:carried
                acc = ts.astype(acc, ts.f16)
            z.store(ts.astype(acc, ts.f32))
    assert_diagnostic(ei.value, HERE, "E:carried", "changes type inside the loop")


def test_float_floor_division_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            z.store(ts.full((16,), 7.0, ts.f32) // 2.0)  # E:float-floordiv
    assert_diagnostic(ei.value, HERE, "E:float-floordiv", "defined for integer tiles only")


# --- S4: pointers and atomics only in unsafe kernels ---------------------------------------
def test_load_ptr_in_a_safe_kernel():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            z.store(ts.load_ptr(x, ts.arange(0, 16)))  # E:load-ptr
    assert_diagnostic(ei.value, HERE, "E:load-ptr", "`ts.load_ptr` is only allowed in unsafe kernels")


def test_ptr_parameter_in_a_safe_kernel():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)],
              p: ts.Ptr[ts.f32]):  # E:ptr-param
            z.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:ptr-param", "only unsafe kernels may take")


# --- syntax the language does not have --------------------------------------------------------
def test_break_is_reported_at_its_line():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], n: int):
            acc = ts.zeros((16,), ts.f32)
            for i in range(n):
                acc = acc + 1.0
                break  # E:break
            z.store(acc)
    assert_diagnostic(ei.value, HERE, "E:break", "`Break` is not supported in a kernel")


def test_lambda_is_reported_at_its_line():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            z.store((lambda t: t * 2.0)(ts.zeros((16,), ts.f32)))  # E:lambda
    assert_diagnostic(ei.value, HERE, "E:lambda", "`Lambda` is not supported in a kernel")
    assert "@ts.function" in ei.value.help


def test_nested_def_is_reported_at_its_line():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            def helper(t):  # E:nested-def
                return t
            z.store(helper(ts.zeros((16,), ts.f32)))
    assert_diagnostic(ei.value, HERE, "E:nested-def", "`FunctionDef` is not supported in a kernel")


@pytest.mark.parametrize("what", ["try", "with", "listcomp", "fstring", "assert", "continue", "global"])
def test_other_unsupported_constructs(what):
    with pytest.raises(ts.KernelError) as ei:
        if what == "try":
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)]):
                try:  # E:try
                    z.store(ts.zeros((16,), ts.f32))
                except ValueError:
                    pass
        elif what == "with":
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)]):
                with ts.backend("reference"):  # E:with
                    z.store(ts.zeros((16,), ts.f32))
        elif what == "listcomp":
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)]):
                z.store(ts.zeros((16,), ts.f32) + len([i for i in (1, 2)]))  # E:listcomp
        elif what == "fstring":
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)]):
                ts.print(f"{1}")  # E:fstring
                z.store(ts.zeros((16,), ts.f32))
        elif what == "assert":
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)]):
                assert True  # E:assert
                z.store(ts.zeros((16,), ts.f32))
        elif what == "continue":
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)], n: int):
                for i in range(n):
                    continue  # E:continue
                z.store(ts.zeros((16,), ts.f32))
        else:
            @ts.kernel
            def k(z: ts.Mut[ts.f32, (16,)]):
                global SCALE  # E:global
                z.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, f"E:{what}", "is not supported in a kernel")


def test_calling_a_plain_python_function_is_refused():
    def helper(t):
        return t

    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            z.store(helper(ts.zeros((16,), ts.f32)))  # E:plain-call
    assert_diagnostic(ei.value, HERE, "E:plain-call", "`helper` cannot be called in a kernel")


def test_errors_in_a_function_helper_point_into_the_helper():
    @ts.function
    def bad_helper(t):
        return t + ts.zeros((8,), ts.f16)  # E:in-helper

    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)]):
            z.store(bad_helper(ts.zeros((16,), ts.f32)))
    assert_diagnostic(ei.value, HERE, "E:in-helper", "cannot mix f32 and f16")


def test_device_ops_outside_a_kernel_say_how_to_use_them():
    with pytest.raises(ts.KernelError, match="only works inside a @ts.kernel"):
        ts.exp(1.0)


# --- more of S1/S2 through helpers, and signature rules ----------------------------------------
@ts.function
def write_to(dst, t):
    dst.store(t)  # E:helper-store


@ts.function
def read_captured():
    return ts.load(CAPTURED, (0,), shape=(16,))  # E:helper-capture


def test_a_helper_cannot_store_to_a_ref_passed_to_it():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            write_to(x, ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:helper-store", "cannot store to `x`: it is a read-only input")


def test_a_helper_cannot_capture_a_tensor_even_when_found_at_first_launch():
    @ts.kernel
    def k(z: ts.Mut[ts.f32, ("B",)], B: ts.Const[int]):
        z.store(read_captured())
    with pytest.raises(ts.KernelError) as ei:
        k(ts.empty(16).partition((16,)))
    assert_diagnostic(ei.value, HERE, "E:helper-capture", "captures the tensor `CAPTURED`")


def test_shape_names_must_be_parameters():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)],
              x: ts.Ref[ts.f32, ("N",)]):  # E:unknown-dim
            z.store(ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:unknown-dim", "names `N`, which is not a parameter")


def test_mut_and_mut_tiles_do_not_mix():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)],
              w: ts.MutTiles[ts.f32, (16,)]):  # E:mixed-outputs
            z.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:mixed-outputs", "either ts.Mut or ts.MutTiles outputs, not both")


def test_output_rank_above_three():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (2, 2, 2, 2)]):  # E:rank4
            z.store(ts.zeros((2, 2, 2, 2), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:rank4", "outputs have rank 1 to 3")


def test_failing_static_assert():
    @ts.kernel
    def k(z: ts.Mut[ts.f32, ("B",)], B: ts.Const[int]):
        ts.static_assert(B >= 32, "B must be at least 32")  # E:static-assert
        z.store(ts.zeros((B,), ts.f32))
    with pytest.raises(ts.KernelError) as ei:
        k(ts.empty(16).partition((16,)))
    assert "static assertion failed: B must be at least 32" in ei.value.message
    assert ei.value.loc.line == __import__("lang_helpers").marker_line(HERE, "E:static-assert")
    k(ts.empty(64).partition((32,))).sync()


@pytest.mark.reference_only
def test_device_print_runs_in_every_block(capsys):
    @ts.kernel
    def k(z: ts.Mut[ts.i32, (4,)]):
        t = ts.arange(0, 4) + ts.block_id(0) * 4
        ts.print("tile", t)
        print("again", ts.sum(t))
        z.store(t)
    with ts.backend("reference"):
        got = launch(k, ts.empty(8, ts.i32), (4,))
    assert got.tolist() == list(range(8))
    out = capsys.readouterr().out
    assert out.count("tile") == 2 and out.count("again") == 2 and "22" in out   # sum of 4..7
