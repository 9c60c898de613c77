"""`ts.freeze`: frozen memory is never written again (runtime/freeze.py).

Every way a launch or the host could write frozen bytes is refused with an OwnershipError at
the caller's line — a kernel's output partition, a library call's `out=` (also when the call's
plan was made with another tensor), host writes, a view of the same storage and another
storage over the same memory — while reads, and writes of the bytes around a frozen view, go
on; a tensor not yet written cannot be frozen. Under PDL a launch whose ts.Ref argument is
frozen may load it before its wait (the Hopper code below, compiled on any machine)."""
import dataclasses
import os
import re

import numpy as np
import pytest
import torch
from runtime_helpers import assert_located
from test_graph_capture import CpuGraph

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe import simt
from tilesafe.runtime.graph import capturing

HERE = __file__


@ts.kernel
def double(y: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    y.store(ts.load_tile_like(x, y) * 2.0)


def test_a_kernel_output_in_frozen_memory_is_refused():
    w = ts.freeze(torch.arange(8, dtype=torch.float32))
    t = ts.from_torch(w)
    with pytest.raises(ts.OwnershipError) as ei:
        t.partition((4,))  # E:partition
    assert "its bytes are frozen (ts.freeze)" in ei.value.message
    assert_located(ei.value, HERE, "E:partition")
    assert w.tolist() == list(range(8))


def test_a_library_out_in_frozen_memory_is_refused_also_after_a_plan_was_made():
    x, w = torch.randn(1, 8), torch.randn(4, 8)
    out = torch.empty(1, 4)
    for _ in range(3):                               # the call's plan, made with an unfrozen out
        tk.linear(x, w, out=out)
    frozen = ts.freeze(torch.full((1, 4), 7.0))
    with pytest.raises(ts.OwnershipError) as ei:
        tk.linear(x, w, out=frozen)  # E:linear
    assert "frozen" in ei.value.message
    assert_located(ei.value, HERE, "E:linear")
    assert (frozen == 7.0).all()


def test_host_writes_and_other_handles_of_frozen_bytes_are_refused():
    base = torch.zeros(16)
    ts.freeze(base[4:12])
    t = ts.from_torch(base)
    with pytest.raises(ts.OwnershipError) as ei:
        t[6] = 1.0  # E:host
    assert "frozen" in ei.value.message
    assert_located(ei.value, HERE, "E:host")
    with pytest.raises(ts.OwnershipError):
        ts.from_torch(base[10:14]).partition((4,))   # overlaps the frozen span
    alias = torch.from_numpy(base.numpy())           # another storage over the same memory
    with pytest.raises(ts.OwnershipError):
        ts.from_torch(alias[0:8]).partition((8,))
    t[0:4] = np.ones(4, np.float32)                  # bytes before and after it stay writable
    double(ts.from_torch(base[12:16]).partition((4,)), ts.from_torch(base[4:8]), B=4)
    assert base[:4].tolist() == [1.0] * 4 and base[12:].tolist() == [0.0] * 4


def test_frozen_memory_is_read_as_before(backend):
    x = ts.freeze(ts.tensor(np.arange(10, dtype=np.float32)))
    y = ts.empty((10,), ts.f32)
    double(y.partition((4,)), x, B=4).sync()
    np.testing.assert_array_equal(y.numpy(), np.arange(10) * 2.0)
    w = ts.freeze(torch.randn(6, 8))
    xs = torch.randn(1, 8)
    np.testing.assert_allclose(tk.linear(xs, w).numpy(), (xs @ w.T).numpy(), rtol=1e-5, atol=1e-5)


def test_memory_not_yet_written_cannot_be_frozen():
    e = ts.empty((8,), ts.f32)
    with pytest.raises(ts.OwnershipError) as ei:
        ts.freeze(e)  # E:unwritten
    assert "has not been written" in ei.value.message
    assert_located(ei.value, HERE, "E:unwritten")


def test_memory_handed_to_torch_and_written_there_can_be_frozen():
    handed = ts.empty((4,), ts.f32).to_torch()       # unwritten, handed to torch
    handed.fill_(2.0)                                # torch writes it (S14: as from_torch sees it)
    assert ts.freeze(handed) is handed
    with pytest.raises(ts.OwnershipError, match="frozen"):
        ts.from_torch(handed).partition((4,))
    y = ts.empty((4,), ts.f32)
    double(y.partition((4,)), handed, B=4).sync()
    np.testing.assert_array_equal(y.numpy(), [4.0] * 4)


def test_freeze_takes_a_tensor():
    with pytest.raises(ts.LaunchError) as ei:
        ts.freeze([1.0, 2.0])  # E:list
    assert "ts.freeze takes a ts.Tensor or a torch.Tensor, got list" in ei.value.message
    assert_located(ei.value, HERE, "E:list")


# --- Hopper code: a frozen Ref's leading loads go before the PDL wait -------------------------
hopper = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                            reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")
GLOBAL_LOAD = re.compile(r"^(@!?%\w+\s+)?ld\.global")


@ts.kernel
def gemv(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], x: ts.Ref[ts.bf16, ("K",)],
         BN: ts.Const[int], BK: ts.Const[int], N: int, K: int):
    j = ts.block_id(0)
    w0 = ts.load(w, (j, 0), shape=(BN, BK)).astype(ts.f32)       # the weight first
    acc = ts.sum(w0 * ts.expand_dims(ts.load(x, (0,), shape=(BK,)).astype(ts.f32), 0), axis=1)
    y.store(acc)


@ts.kernel
def gemv_loop(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], x: ts.Ref[ts.bf16, ("K",)],
              BN: ts.Const[int], BK: ts.Const[int], N: int, K: int):
    acc = ts.zeros((BN,), ts.f32)
    for k in range(K // BK):                                      # a loop that reads w and x
        wt = ts.load(w, (ts.block_id(0), k), shape=(BN, BK)).astype(ts.f32)
        acc = acc + ts.sum(wt * ts.expand_dims(ts.load(x, (k,), shape=(BK,)).astype(ts.f32), 0), axis=1)
    y.store(acc)


def _loads_before_wait(early, kernel=gemv) -> tuple[int, int]:
    specs = (ts.spec((64,), ts.f32, tile=(16,)), ts.spec((64, 64), ts.bf16), ts.spec((64,), ts.bf16))
    sched = dataclasses.replace(ts.schedule(pdl=True), early=frozenset(early))
    ptx = kernel.compile(*specs, BK=64, target="sm_90", schedule=sched).asm["ptx"]
    lines = [ln.strip() for ln in ptx.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    wait = next(i for i, ln in enumerate(lines) if ln.startswith("griddepcontrol.wait"))
    loads = [i for i, ln in enumerate(lines) if GLOBAL_LOAD.match(ln)]
    return sum(i < wait for i in loads), sum(i > wait for i in loads)


@hopper
def test_under_pdl_a_frozen_refs_leading_load_precedes_the_wait_and_the_rest_follows():
    before, after = _loads_before_wait({"w"})
    assert before >= 1 and after >= 1              # w's tile before, x's after
    assert _loads_before_wait(())[0] == 0          # nothing frozen: the wait comes first
    assert _loads_before_wait({"x"})[0] == 0       # x is loaded after w: the head stops at w's load


@hopper
def test_under_pdl_a_loop_goes_before_the_wait_only_when_every_load_in_it_is_frozen():
    assert _loads_before_wait({"w"}, gemv_loop)[0] == 0           # it also reads x: the wait comes first
    before, after = _loads_before_wait({"w", "x"}, gemv_loop)
    assert before >= 2 and after == 0                              # all of it ahead of the wait


# --- writes no partition lends: a ts.Ptr of an unsafe kernel, a SIMT kernel's outputs -------------
@ts.kernel(unsafe=True)
def scatter(out: ts.Ptr[ts.f32], x: ts.Ref[ts.f32, ("N",)], N: int):
    v = ts.load(x, (ts.block_id(0),), shape=(8,))
    ts.store_ptr(out, ts.arange(0, 8), v, mask=ts.valid(v))


def test_an_unsafe_kernels_ptr_into_frozen_memory_is_refused(backend):
    w = ts.freeze(torch.zeros(8))
    with pytest.raises(ts.OwnershipError) as ei:
        scatter.unsafe_launch(w, torch.ones(8), grid=(1,))  # E:ptr
    assert "argument `out` of `scatter` is written, but its bytes are frozen (ts.freeze)" in ei.value.message
    assert_located(ei.value, HERE, "E:ptr")
    assert w.tolist() == [0.0] * 8
    out = torch.zeros(8)
    scatter.unsafe_launch(out, w, grid=(1,)).sync()           # a frozen Ref is read as before
    assert out.tolist() == [0.0] * 8


@simt.kernel(contract=simt.Contract(block=(32,)))
def fill(out: simt.Disjoint[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.chunk(1)):
        out[p] = 5.0


def test_a_simt_output_in_frozen_memory_is_refused_also_after_its_plan_was_made():
    out = torch.zeros(16)
    for _ in range(2):
        fill(out).sync()                                      # the layout's plan, made unfrozen
    base = torch.zeros(32)
    ts.freeze(base[8:16])
    for view in (base[0:16], base[4:24]):                     # the plan's layout, then a fresh one
        with pytest.raises(ts.OwnershipError) as ei:
            fill(view)  # E:simt
        assert "argument `out` of `fill` is written, but its bytes are frozen (ts.freeze)" in ei.value.message
        assert_located(ei.value, HERE, "E:simt")
    assert base.tolist() == [0.0] * 32
    fill(base[16:32]).sync()                                  # the bytes after it stay writable
    assert base[16:].tolist() == [5.0] * 16


def test_a_graph_that_writes_memory_frozen_since_its_capture_is_refused_at_replay(backend):
    x, z = ts.tensor(np.arange(8, dtype=np.float32)), ts.zeros(8)
    g = CpuGraph(backend)
    with capturing(g):
        g.record(z, True)          # what the launch records in a GPU capture (a CPU stand-in runs it at once)
        p = z.partition((4,))
        double(p, x, B=4)
    z = p.unpartition()
    g.replay()
    ts.freeze(z[4:8])
    with pytest.raises(ts.OwnershipError) as ei:
        g.replay()  # E:replay
    assert "this graph writes memory frozen (ts.freeze) since its capture" in ei.value.message
    assert_located(ei.value, HERE, "E:replay")
    assert g.device_replays == 1
    g2, y = CpuGraph(backend), ts.zeros(4)          # a graph that only reads the frozen bytes replays
    with capturing(g2):
        g2.record(z[4:8], False)
        double(y.partition((4,)), z[4:8], B=4)
    g2.replay()
    assert g2.device_replays == 1
