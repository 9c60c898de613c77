"""A fused one-row GEMV takes the tuned table's entry for its own weight and form
(`<weight class>/gemv/<silu|norm|res>`, linear_fusions.fused_config) where the GPU measured
one; everywhere else — other forms, other weights, 2..16 rows, `linear` itself — `linear`'s
config, as before. Checked on the H200's compile target (launches recorded, not run)."""
import copy

import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.backends.triton import targets
from tilesafe.kernels import configs

BF = torch.bfloat16
E, I = 4096, 12288                       # Qwen3-8B: hidden, intermediate
OWN = {"block_m": 16, "block_n": 32, "block_k": 256, "min_blocks": 1, "split_k": 4, "prefetch": False,
       "num_warps": 4, "num_stages": 4, "time_ms": 0.05}


def e(*shape):
    return torch.empty(shape, dtype=BF)


@pytest.fixture
def launches(gemv_launches, monkeypatch):
    """`gemv_launches`, under a table whose only addition is a fused entry (OWN) for the 8B down
    projection's silu_mul_linear."""
    table = copy.deepcopy(configs.tuned_table("nvidia-h200"))
    table.setdefault("linear", {})[f"bf16/{E}x{I}/gemv/silu"] = OWN
    monkeypatch.setattr(configs, "tuned_table", lambda gpu: table)
    return gemv_launches


def resolved(seen, call):
    """The call's launches as (kernel, output tiles, the loop's constants)."""
    seen.clear()
    with targets.compiling_for("sm_90"):
        call()
    return [(k, tiles, loop) for k, tiles, _, loop in seen]


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
    assert fused == plain                                  # (linear's kernels under their fused names)


def test_on_the_cpu_backends_no_entry_applies(monkeypatch):
    monkeypatch.setattr(configs, "tuned_table", lambda gpu: {"linear": {f"bf16/{E}x{I}/gemv/silu": OWN}})
    assert configs.tuned_entry("linear", f"bf16/{E}x{I}/gemv/silu") is None


# The committed H200 picks, from benchmarks/probes/fused_gemv_probe.py (session 20 mid round, us per call,
# weights from HBM): the fused down projections of 32B (the engine's pick 81.4 -> 66.3), 14B (56.3 -> 45.9)
# and 8B (35.9 -> 27.2), 32B's o with the residual (23.6 -> 22.4), and 14B's plain qkv and gate/up GEMVs
# (22.3 -> 19.6, 85.1 -> 81.9).
PICKS = [
    (lambda: tk.silu_mul_linear(e(1, 2 * 25600), e(5120, 25600), residual=e(1, 5120)), (8, 512, False)),
    (lambda: tk.silu_mul_linear(e(1, 2 * 17408), e(5120, 17408), residual=e(1, 5120)), (8, 512, False)),
    (lambda: tk.silu_mul_linear(e(1, 2 * 12288), e(4096, 12288), residual=e(1, 4096)), (8, 512, True)),
    (lambda: tk.linear(e(1, 8192), e(5120, 8192), residual=e(1, 5120)), (8, 512, False)),
    (lambda: tk.linear(e(1, 5120), e(7168, 5120)), (4, 1024, False)),
    (lambda: tk.linear(e(1, 5120), e(34816, 5120)), (4, 1024, False)),
]


@pytest.mark.parametrize("call, pick", PICKS)
def test_the_h200_tables_measured_picks(gemv_launches, call, pick):
    bn, bk, prefetch = pick
    assert resolved(gemv_launches, call) == [("fused_skinny_kernel", {"c": (1, bn)},
                                         {"BK": bk, "DOT": False, "PREFETCH": prefetch})]


def test_the_32b_o_projection_without_its_residual_keeps_linears_entry(gemv_launches):
    """linear's own entry for 5120 x 8192 (4 x 2048) stays: the fused entry is the residual form's."""
    got = resolved(gemv_launches, lambda: tk.linear(e(1, 8192), e(5120, 8192)))
    assert [(t, loop["BK"]) for _, t, loop in got] == [({"c": (1, 4)}, 2048)]
