"""The one-row fused GEMV's PREFETCH loop issues the next step's loads — the weight tile and
what x's tile is made from (gate and up, or x and the norm weight) — before this step's
prologue math, so no step waits for a load it issued itself. Made at load time, the prologue
waited for x's tiles (from L2) before the weight tile after them was issued: the Qwen3-32B
down projection (silu_mul_linear, 5120 x 25600) ran at 2.85 TB/s on the H200 where its plain
GEMV with the same config streams ~4.1. Checked in the Hopper code (compiled ahead, no GPU)."""
import os
import re

import pytest

import tilesafe as ts
from tilesafe.kernels.linear_fusions import NORM_LATE, PLAIN, RES_OWN, SILU_MUL, fused_skinny_kernel

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1",
    reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")
N, K, BN, BK = 5120, 25600, 8, 512     # the 32B down projection's tuned GEMV (prefetch, 8 x 512)


def loop_body(pro: int) -> list[str]:
    """The TTGIR lines of the K loop of the one-row PREFETCH form, prologue `pro`."""
    specs = (ts.spec((1, N), ts.bf16, tile=(1, BN)), ts.spec((1, K), ts.bf16, strides=(2 * K, 1)),
             ts.spec((1, K), ts.bf16, strides=(2 * K, 1)), ts.spec((K,), ts.bf16),
             ts.spec((K, N), ts.bf16, strides=(1, K)), ts.spec((N,), ts.bf16), ts.spec((1, N), ts.bf16))
    compiled = fused_skinny_kernel.compile(
        *specs, T=ts.bf16, TG=ts.bf16, TB=ts.bf16, PRO=pro, RES=RES_OWN, HAS_BIAS=False, ACT=-1, TF32=False,
        DOT=False, PREFETCH=True, DEEP=False, PEEL=False, BM=1, BK=BK, L2P=0, L2K=False, eps=1e-6,
        target="sm_90", schedule=ts.schedule(num_warps=4, num_stages=3))
    lines = compiled.asm["ttgir"].splitlines()
    start = next(i for i, ln in enumerate(lines) if "scf.for" in ln)
    end = next(i for i in range(start, len(lines)) if "scf.yield" in lines[i])
    return lines[start + 1:end]


@pytest.mark.parametrize("pro, loads", [(SILU_MUL, 3), (NORM_LATE, 3), (PLAIN, 2)])
def test_the_next_steps_loads_come_before_this_steps_math(pro, loads):
    body = loop_body(pro)
    at = [i for i, ln in enumerate(body) if re.search(r"= tt\.load ", ln)]
    first_math = next(i for i, ln in enumerate(body) if re.search(r"= arith\.extf ", ln))
    assert len(at) == loads                      # weight, x, and up or the norm weight
    assert max(at) < first_math                  # every load issued before any loaded value is used


def test_the_weight_tile_keeps_its_load_layout():
    """The (BK, BN) weight tile is multiplied in the layout it is loaded in: the layout change
    in the loop is x's (BK, 1) column, not 4096 weight elements through shared memory a step."""
    converts = [ln for ln in loop_body(SILU_MUL) if "ttg.convert_layout" in ln]
    assert converts and all(f"tensor<{BK}x1x" in ln for ln in converts)
