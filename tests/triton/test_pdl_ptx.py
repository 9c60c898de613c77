"""PDL's soundness in the machine code: under programmatic dependent launch a kernel may start
while the one before it still runs, so no global-memory access may execute before its
`griddepcontrol.wait`. Compiled for Hopper on any machine (no GPU): in the PTX of a pointer
GEMV, a TMA GEMM and a persistent GEMM launched with pdl, the wait is in the entry block,
before any branch, and every global load, store, atomic and bulk copy comes after it.
(Triton's gdc_wait is an inline asm with side effects: the compiler may not move memory
accesses across it; this checks that it did not.)"""
import os
import re

import pytest

import tilesafe as ts
from triton_helpers import gemm, persistent_gemm

pytestmark = [pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                 reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile"),
              pytest.mark.interpreter_only]   # compile-only: one run is enough, also on a GPU machine

PDL = ts.schedule(pdl=True)
# Instructions that may touch global memory: loads, stores, atomics, reductions, async and
# bulk copies, prefetches; by state space, everything but parameters, shared and local memory.
ACCESS = re.compile(r"^(@!?%\w+\s+)?(ld|st|atom|red|cp|prefetch|multimem)\.")   # predicated ones too
NOT_GLOBAL = re.compile(r"\.(param|shared|local|const)\b|tensormap")   # a TMA descriptor is a kernel parameter


@ts.kernel
def gemv(y: ts.Mut[ts.f32, ("BN",)], w: ts.Ref[ts.bf16, ("N", "K")], x: ts.Ref[ts.bf16, ("K",)],
         BN: ts.Const[int], BK: ts.Const[int], N: int, K: int):
    acc = ts.zeros((BN,), ts.f32)
    for k in range(ts.num_tiles(x.partition((BK,)), 0)):
        wt = ts.load(w, (ts.block_id(0), k), shape=(BN, BK)).astype(ts.f32)
        xt = ts.load(x, (k,), shape=(BK,)).astype(ts.f32)
        acc = acc + ts.sum(wt * ts.expand_dims(xt, 0), axis=1)
    y.store(acc)


def instructions(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith("//")]


def check_wait_first(ptx: str) -> int:
    """Assert the PTX waits before any global access; return how many accesses follow."""
    lines = instructions(ptx)
    body = lines[next(i for i, line in enumerate(lines) if ".entry " in line):]
    wait = next(i for i, line in enumerate(body) if line.startswith("griddepcontrol.wait"))
    before = body[:wait]
    assert not [line for line in before if re.search(r"\bbra(\.uni)?\b", line) or line.startswith("$L__BB")], before
    assert not [line for line in before if ACCESS.match(line) and not NOT_GLOBAL.search(line)], before
    assert any(line.startswith("griddepcontrol.launch_dependents") for line in body[wait:])
    after = [line for line in body[wait:] if ACCESS.match(line) and not NOT_GLOBAL.search(line)]
    assert after                               # the check saw the kernel's accesses
    return len(after)


def test_a_gemv_waits_before_its_first_weight_or_vector_load():
    specs = (ts.spec((256,), ts.f32, tile=(64,)), ts.spec((256, 512), ts.bf16), ts.spec((512,), ts.bf16))
    k = gemv.compile(*specs, BK=128, target="sm_90", schedule=PDL)
    assert check_wait_first(k.asm["ptx"]) > 0
    assert k.metadata.launch_pdl
    plain = gemv.compile(*specs, BK=128, target="sm_90")
    assert "griddepcontrol" not in plain.asm["ptx"] and not plain.metadata.launch_pdl


def test_a_tma_gemm_waits_before_its_first_bulk_copy():
    specs = (ts.spec((256, 256), ts.bf16, tile=(128, 128)), ts.spec((256, 512), ts.bf16),
             ts.spec((512, 256), ts.bf16))
    k = gemm.compile(*specs, BK=64, target="sm_90", schedule=ts.schedule(pdl=True, tma=True))
    ptx = k.asm["ptx"]
    assert "cp.async.bulk.tensor" in ptx
    check_wait_first(ptx)


def test_a_persistent_gemm_waits_before_its_tile_loop():
    specs = (ts.spec((256, 256), ts.f16, tile=(64, 64)), ts.spec((256, 128), ts.f16), ts.spec((128, 256), ts.f16))
    k = persistent_gemm.compile(*specs, BK=32, target="sm_90", schedule=PDL)
    check_wait_first(k.asm["ptx"])
