"""Inspection without running: kernel.ir(...) shows the expected ops, and kernel.checks(...)
(the S11 report) moves accesses from "masked in the kernel" to "proven by launch facts" when
the extents divide, and to "proven statically" when a Ref's dims are static."""
import re

import numpy as np
from lang_helpers import launch, marker_line, rand

import tilesafe as ts

HERE = __file__


@ts.kernel
def add(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))  # L:add


@ts.kernel
def matmul(c: ts.Mut[ts.f32, ("BM", "BN")], a: ts.Ref[ts.f32, ("M", "K")], b: ts.Ref[ts.f32, ("K", "N")],
           BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    acc = ts.zeros((BM, BN), ts.f32)
    for k in range(ts.num_tiles(pa, 1)):
        acc = ts.mma(pa.load((ts.block_id(0), k)), pb.load((k, ts.block_id(1))), acc)  # L:mma
    c.store(acc)  # L:store


def _opcodes(ir: str) -> list[str]:
    """The opcodes of an IR listing: `%3 = load(...)` and `store(...)` lines."""
    return re.findall(r"^\s*(?:%\w+(?:, %\w+)* = )?([a-z_]+)\(", ir, flags=re.M)


def test_ir_of_an_elementwise_kernel():
    ir = add.ir(ts.spec(1000, tile=128), ts.spec(1000), ts.spec(1000))
    ops = _opcodes(ir)
    assert ops.count("load") == 2 and ops.count("binary") == 1 and ops.count("store") == 1
    assert "op='+'" in ir and "f32[128]" in ir
    assert f"line {marker_line(HERE, 'L:add')}" in ir


def test_ir_of_a_gemm_shows_the_loop_and_mma():
    ir = matmul.ir(ts.spec((64, 32), tile=(32, 16)), ts.spec((64, 48)), ts.spec((48, 32)), BK=16)
    ops = _opcodes(ir)
    for op in ("full", "num_tiles", "for", "block_id", "load", "mma", "yield", "store"):
        assert op in ops, (op, ir)
    assert ops.count("load") == 2 and ops.count("mma") == 1 and ops.count("store") == 1
    assert "precision='ieee'" in ir and "f32[32,16]" in ir


def test_ir_specializes_on_dtypes_and_consts():
    @ts.kernel
    def cast(z: ts.Mut["D", ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], D: ts.Const[ts.DType], N: int):
        z.store(ts.astype(ts.load_tile_like(x, z), D))
    ir16 = cast.ir(ts.spec(100, ts.bf16, tile=64), ts.spec(100))
    ir8 = cast.ir(ts.spec(100, ts.f8e4m3fn, tile=32), ts.spec(100))
    assert "bf16[64]" in ir16 and "cast" in _opcodes(ir16)
    assert "f8e4m3fn[32]" in ir8


def test_checks_masked_when_ragged_and_proven_by_launch_facts_when_divisible():
    ragged = add.checks(ts.spec(1000, tile=128), ts.spec(1000), ts.spec(1000))
    assert (ragged.static, ragged.launch, ragged.kernel) == (0, 0, 3)
    exact = add.checks(ts.spec(1024, tile=128), ts.spec(1024), ts.spec(1024))
    assert (exact.static, exact.launch, exact.kernel) == (0, 3, 0)
    line = marker_line(HERE, "L:add")
    assert sorted(exact.accesses) == [(line, "load x", "launch"), (line, "load y", "launch"),
                                      (line, "store z", "launch")]
    assert "3 proven by launch facts" in str(exact) and "3 masked in the kernel" in str(ragged)


def test_checks_of_a_gemm_per_axis():
    # M, N divide but K does not: the loads along K stay masked, the store is proven.
    r = matmul.checks(ts.spec((64, 32), tile=(32, 16)), ts.spec((64, 50)), ts.spec((50, 32)), BK=16)
    by_line = {(line, what): status for line, what, status in r.accesses}
    assert by_line[(marker_line(HERE, "L:mma"), "load a")] == "kernel"
    assert by_line[(marker_line(HERE, "L:mma"), "load b")] == "kernel"
    assert by_line[(marker_line(HERE, "L:store"), "store c")] == "launch"
    r = matmul.checks(ts.spec((64, 32), tile=(32, 16)), ts.spec((64, 48)), ts.spec((48, 32)), BK=16)
    assert (r.static, r.launch, r.kernel) == (0, 3, 0)
    r = matmul.checks(ts.spec((70, 32), tile=(32, 16)), ts.spec((70, 48)), ts.spec((48, 32)), BK=16)
    assert r.kernel >= 2   # rows of a and of c are ragged


@ts.kernel
def static_ref(z: ts.Mut[ts.f32, ("B", 64)], w: ts.Ref[ts.f32, (64, 64)], x: ts.Ref[ts.f32, ("N", 64)],
               B: ts.Const[int], N: int):
    pw = w.partition((64, 64))
    z.store(ts.dot(ts.load_tile_like(x, z), pw.load((0, 0))))  # L:static


def test_static_ref_dims_are_proven_statically():
    r = static_ref.checks(ts.spec((100, 64), tile=(32, 64)), ts.spec((64, 64)), ts.spec((100, 64)))
    status = {what: s for _, what, s in r.accesses}
    assert status["load w"] == "static"
    assert status["load x"] == "kernel" and status["store z"] == "kernel"   # 100 rows in tiles of 32
    assert (r.static, r.launch, r.kernel) == (1, 0, 2)
    r = static_ref.checks(ts.spec((128, 64), tile=(32, 64)), ts.spec((64, 64)), ts.spec((128, 64)))
    assert (r.static, r.launch, r.kernel) == (1, 2, 0)


def test_checks_do_not_change_results(backend):
    # The maskless and the masked specializations compute the same values.
    rng = np.random.default_rng(130)
    for n in (1024, 1000):
        x, y = rand(rng, n, "f32"), rand(rng, n, "f32")
        assert np.array_equal(launch(add, ts.empty(n), (128,), ts.tensor(x), ts.tensor(y)), x + y)


def test_inspection_refuses_bad_specs_like_a_launch():
    import pytest
    with pytest.raises(ts.LaunchError, match="dtype f16"):
        add.checks(ts.spec(1000, tile=128), ts.spec(1000, ts.f16), ts.spec(1000))
    with pytest.raises(ts.LaunchError, match="needs a partition"):
        add.ir(ts.spec(1000), ts.spec(1000), ts.spec(1000))
