"""`ts.prefetch`: an L2 hint on a read-only input's tile (lang/prefetch.py).

It never changes a result (both CPU backends, ragged shapes, against NumPy); it names only a
ts.Ref and a tile that can overlap it (negative tests: class, message, line); its bounds are
reported like a load's; and under programmatic dependent launch the Triton backend issues it
before `griddepcontrol.wait` while every load still follows the wait (compiled for Hopper on
any machine)."""
import os
import re

import numpy as np
import pytest
from lang_helpers import assert_diagnostic, launch, poisoned, rand

import tilesafe as ts

HERE = __file__


@ts.kernel
def rowsum(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref["T", ("N", "K")], x: ts.Ref["T", ("K",)], T: ts.Const[ts.DType],
           BN: ts.Const[int], BK: ts.Const[int], P: ts.Const[int], N: int, K: int):
    j = ts.block_id(0)
    px = x.partition((BK,))
    for k in range(min(P, ts.num_tiles(px, 0))):
        ts.prefetch(w, (j, k), shape=(BN, BK))      # the first P tiles of this block's rows
    acc = ts.zeros((BN,), ts.f32)
    for k in range(ts.num_tiles(px, 0)):
        wt = ts.load(w, (j, k), shape=(BN, BK)).astype(ts.f32)
        acc = acc + ts.sum(wt * ts.expand_dims(px.load((k,)).astype(ts.f32), 0), axis=1)
    y.store(acc)


@pytest.mark.parametrize("n,k,p", [(40, 70, 2), (32, 64, 8), (7, 5, 1)])
def test_a_prefetching_gemv_computes_what_numpy_does(backend, n, k, p):
    rng = np.random.default_rng(n + k)
    w, x = rand(rng, (n, k), "f32"), rand(rng, (k,), "f32")
    y, _ = poisoned(n, "f32")
    got = launch(rowsum, y, (16,), ts.tensor(w), ts.tensor(x), BK=32, P=p)
    np.testing.assert_allclose(got, w.astype(np.float64) @ x.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_the_bounds_report_lists_the_prefetch_as_an_access():
    specs = (ts.spec((40,), ts.f32, tile=(16,)), ts.spec((40, 70), ts.f32), ts.spec((70,), ts.f32))
    report = rowsum.checks(*specs, BK=32, P=2)
    assert any(what == "prefetch w" and status == "kernel" for _, what, status in report.accesses), report
    even = rowsum.checks(ts.spec((32,), ts.f32, tile=(16,)), ts.spec((32, 64), ts.f32), ts.spec((64,), ts.f32),
                         BK=32, P=2)
    assert any(what == "prefetch w" and status == "launch" for _, what, status in even.accesses), even


# --- refused ----------------------------------------------------------------------------------
def test_prefetching_an_output_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            ts.prefetch(z, (0,), shape=(16,))  # E:prefetch-output
            z.store(ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:prefetch-output", "ts.prefetch names a read-only input (ts.Ref); `z` is")


def test_prefetching_a_tile_before_the_tensor_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
            ts.prefetch(x, (0, -1), shape=(1, 16))  # E:prefetch-negative
            z.store(ts.load_tile_like(x, z) if False else ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:prefetch-negative", "tile index -1 of ts.prefetch is before the start of `x`")


def test_prefetching_with_a_tile_of_another_rank_is_refused():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
            ts.prefetch(x, (0,), shape=(16,))  # E:prefetch-rank
            z.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:prefetch-rank", "the tile shape (16,) has rank 1, but `x` has rank 2")


def test_prefetch_on_the_host_explains_itself():
    with pytest.raises(ts.KernelError, match="only works inside a @ts.kernel"):
        ts.prefetch(None, (0,), shape=(16,))


# --- Hopper code: the prefetch goes before the PDL wait, every load after it ----------------------
hopper = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                            reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")
ACCESS = re.compile(r"^(@!?%\w+\s+)?(ld|st|atom|red|cp)\.")   # predicated too
NOT_GLOBAL = re.compile(r"\.(param|shared|local|const)\b|tensormap")


def _body(ptx: str) -> list[str]:
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    return lines[next(i for i, ln in enumerate(lines) if ".entry " in ln):]


@hopper
@pytest.mark.parametrize("n,k", [(64, 128), (40, 70)])          # ragged: the prefetch is predicated
def test_under_pdl_the_prefetch_precedes_the_wait_and_every_access_follows_it(n, k):
    specs = (ts.spec((n,), ts.f32, tile=(16,)), ts.spec((n, k), ts.bf16), ts.spec((k,), ts.bf16))
    ptx = rowsum.compile(*specs, BK=64, P=2, target="sm_90", schedule=ts.schedule(pdl=True)).asm["ptx"]
    body = _body(ptx)
    wait = next(i for i, ln in enumerate(body) if ln.startswith("griddepcontrol.wait"))
    prefetches = [i for i, ln in enumerate(body) if "prefetch.global.L2" in ln]
    assert prefetches and max(prefetches) < wait, body[:wait]
    assert not [ln for ln in body[:wait] if ACCESS.match(ln) and not NOT_GLOBAL.search(ln)], body[:wait]
    assert [ln for ln in body[wait:] if ACCESS.match(ln) and not NOT_GLOBAL.search(ln)]
    assert ("@p prefetch" in ptx) == (n % 16 != 0 or k % 64 != 0)   # masked only where the tile can stick out
    plain = rowsum.compile(*specs, BK=64, P=2, target="sm_90").asm["ptx"]
    assert "prefetch" not in plain and "griddepcontrol" not in plain


@hopper
def test_keep_prefetches_with_evict_last_priority():
    specs = (ts.spec((64,), ts.f32, tile=(16,)), ts.spec((64, 128), ts.bf16), ts.spec((128,), ts.bf16))
    for keep in (False, True):
        ptx = kept.compile(*specs, BK=64, KEEP=keep, target="sm_90", schedule=ts.schedule(pdl=True)).asm["ptx"]
        assert ("prefetch.global.L2::evict_last" in ptx) == keep and "prefetch.global.L2" in ptx


@ts.kernel
def kept(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], x: ts.Ref[ts.bf16, ("K",)],
         BN: ts.Const[int], BK: ts.Const[int], KEEP: ts.Const[bool], N: int, K: int):
    ts.prefetch(w, (ts.block_id(0), 0), shape=(BN, BK), keep=KEEP)
    t = ts.load(w, (ts.block_id(0), 0), shape=(BN, BK)).astype(ts.f32)
    y.store(ts.sum(t, axis=1) + ts.sum(ts.load(x, (0,), shape=(BK,)).astype(ts.f32)))


def test_keep_must_be_a_compile_time_bool():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
            ts.prefetch(x, (0,), shape=(16,), keep=N > 3)  # E:prefetch-keep
            z.store(ts.load_tile_like(x, z))
    assert_diagnostic(ei.value, HERE, "E:prefetch-keep", "keep= of ts.prefetch must be a compile-time bool")


@ts.kernel
def late(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], BN: ts.Const[int], BK: ts.Const[int],
         N: int, K: int):
    t = ts.load(w, (ts.block_id(0), 0), shape=(BN, BK)).astype(ts.f32)
    ts.prefetch(w, (ts.block_id(0), 1), shape=(BN, BK))          # after a load: after the wait too
    y.store(ts.sum(t, axis=1))


@hopper
def test_a_prefetch_after_a_load_leaves_the_wait_first():
    specs = (ts.spec((64,), ts.f32, tile=(16,)), ts.spec((64, 128), ts.bf16))
    body = _body(late.compile(*specs, BK=64, target="sm_90", schedule=ts.schedule(pdl=True)).asm["ptx"])
    wait = next(i for i, ln in enumerate(body) if ln.startswith("griddepcontrol.wait"))
    assert not [ln for ln in body[:wait] if "prefetch" in ln or ACCESS.match(ln) and not NOT_GLOBAL.search(ln)]
    assert any("prefetch.global.L2" in ln for ln in body[wait:])


@ts.kernel
def mixed(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], BN: ts.Const[int], BK: ts.Const[int],
          N: int, K: int):
    acc = ts.zeros((BN,), ts.f32)
    for k in range(2):                                            # a loop that also loads: after the wait
        ts.prefetch(w, (ts.block_id(0), k + 1), shape=(BN, BK))
        acc = acc + ts.sum(ts.load(w, (ts.block_id(0), k), shape=(BN, BK)).astype(ts.f32), axis=1)
    y.store(acc)


@ts.kernel
def branched(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], BN: ts.Const[int], BK: ts.Const[int],
             N: int, K: int):
    if K > BK:                                                    # a branch of prefetches only: before the wait
        ts.prefetch(w, (ts.block_id(0), 1), shape=(BN, BK))
    y.store(ts.sum(ts.load(w, (ts.block_id(0), 0), shape=(BN, BK)).astype(ts.f32), axis=1))


@hopper
@pytest.mark.parametrize("kernel,early", [(mixed, False), (branched, True)])
def test_only_regions_made_of_prefetches_and_arithmetic_go_before_the_wait(kernel, early):
    specs = (ts.spec((64,), ts.f32, tile=(16,)), ts.spec((64, 256), ts.bf16))
    body = _body(kernel.compile(*specs, BK=64, target="sm_90", schedule=ts.schedule(pdl=True)).asm["ptx"])
    wait = next(i for i, ln in enumerate(body) if ln.startswith("griddepcontrol.wait"))
    assert not [ln for ln in body[:wait] if ACCESS.match(ln) and not NOT_GLOBAL.search(ln)], body[:wait]
    assert any("prefetch.global.L2" in ln for ln in body[:wait]) == early, body[:wait]
    assert any("prefetch.global.L2" in ln for ln in body[wait:]) != early
