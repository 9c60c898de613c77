"""A fused one-row GEMV takes the tuned table's entry for its own weight and form
(`<weight class>/gemv/<silu|norm|res>`, linear_fusions.fused_config) where the GPU measured
one; everywhere else — other forms, other weights, 2..16 rows, `linear` itself — `linear`'s
config, as before. Checked on the H200's compile target (launches recorded, not run)."""
import copy
import sys

import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.backends.triton import targets
from tilesafe.kernels import call_plans, configs

BF = torch.bfloat16
E, I = 4096, 12288                       # Qwen3-8B: hidden, intermediate
OWN = {"block_m": 16, "block_n": 32, "block_k": 256, "min_blocks": 1, "split_k": 4, "prefetch": False,
       "num_warps": 4, "num_stages": 4, "time_ms": 0.05}
PAIRS = {"skinny_kernel": "fused_skinny_kernel", "split_k_kernel": "fused_split_kernel",
         "split_sum_kernel": "fused_sum_kernel"}


def e(*shape):
    return torch.empty(shape, dtype=BF)


@pytest.fixture
def launches(monkeypatch):
    """Each launch as (kernel, output tiles, the loop's constants), under a table whose only
    addition is a fused entry for the 8B down projection's silu_mul_linear."""
    seen = []

    def record(kernel, outputs, grid=None, cfg=None, pdl=False, **args):
        loop = {k: args[k] for k in ("BK", "PER", "DOT", "PREFETCH") if k in args}
        seen.append((PAIRS.get(kernel.name, kernel.name), {n: t for n, (_, t) in outputs.items()}, loop))
    table = copy.deepcopy(configs.tuned_table("nvidia-h200"))
    table.setdefault("linear", {})[f"bf16/{E}x{I}/gemv/silu"] = OWN
    monkeypatch.setattr(configs, "tuned_table", lambda gpu: table)
    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    monkeypatch.setattr(call_plans, "call_key", lambda *a: (None, None))
    for name in ("matmul", "linear_fusions"):
        monkeypatch.setattr(sys.modules[f"tilesafe.kernels.{name}"], "launch", record)
    return seen


def resolved(seen, call):
    seen.clear()
    with targets.compiling_for("sm_90"):
        call()
    return list(seen)


def test_the_down_projections_fused_call_takes_its_own_entry(launches):
    got = resolved(launches, lambda: tk.silu_mul_linear(e(1, 2 * I), e(E, I), residual=e(1, E)))
    per = -(-(I // 256) // 4)                                          # K tiles per split of 4
    assert [k for k, _, _ in got] == ["fused_split_kernel", "fused_sum_kernel"]
    assert got[0][1] == {"part": (1, 1, 32)} and got[0][2]["BK"] == 256 and got[0][2]["PER"] == per


def test_linear_and_the_other_forms_keep_linears_config(launches):
    plain = resolved(launches, lambda: tk.linear(e(1, I), e(E, I)))
    assert [(k, t) for k, t, _ in plain] == [("fused_skinny_kernel", {"c": (1, 4)})]   # the table's 4 x 1024 GEMV
    res = resolved(launches, lambda: tk.linear(e(1, I), e(E, I), residual=e(1, E)))
    assert res == [("fused_skinny_kernel", plain[0][1], plain[0][2])]


def test_two_rows_keep_linears_config(launches):
    plain = resolved(launches, lambda: tk.linear(e(2, I), e(E, I)))
    fused = resolved(launches, lambda: tk.silu_mul_linear(e(2, 2 * I), e(E, I), residual=e(2, E)))
    assert fused == [(PAIRS.get(k, k), t, loop) for k, t, loop in plain]


def test_on_the_cpu_backends_no_entry_applies(monkeypatch):
    monkeypatch.setattr(configs, "tuned_table", lambda gpu: {"linear": {f"bf16/{E}x{I}/gemv/silu": OWN}})
    assert configs.tuned_entry("linear", f"bf16/{E}x{I}/gemv/silu") is None
