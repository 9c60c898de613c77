"""benchmarks/host_overhead.py runs end to end on the CPU (`--device cpu --smoke`), so the
H200 benchmark cannot rot: every call case, the user kernel and the Qwen3-shaped decode step
(whose tilesafe versions, one call per operation and with fused calls, must compute what the
eager torch version computes) on the reference backend; and on Triton's interpreter, the recorded raw Triton launches of a one-kernel and a
two-kernel call replay and are timed. The numbers themselves mean nothing here."""
import json

import pytest


@pytest.fixture
def host_overhead(benchmark_module):
    return benchmark_module("host_overhead", "decode_step", "launch_recorder", "host_timing", "plot_host_overhead")


def test_smoke_run_on_the_reference_backend_writes_every_section(host_overhead, tmp_path, capsys):
    path = tmp_path / "host.json"
    host_overhead.main([str(path), "--device", "cpu", "--smoke"])
    r = json.loads(path.read_text())
    assert r["backend"] == "reference" and r["smoke"] is True
    names = [row["name"] for row in r["calls"]]
    assert names == ["linear M=1", "linear M=8", "matmul", "bmm", "rms_norm", "rms_norm + residual", "add",
                     "residual_add", "silu_mul", "rope", "embedding", "argmax", "softmax", "decode_attention",
                     "flash_attention"]
    for row in r["calls"]:
        assert {"tilesafe", "tilesafe_out", "torch"} <= set(row["host_us"]), row
        assert all(v > 0 for v in row["host_us"].values()), row
        assert row["targets"] == {"recorded": False}       # the reference backend launches no Triton kernel
    assert r["user_kernel"]["host_us"]["tilesafe_fresh"] > 0
    d = r["decode_step"]
    assert d["dims"]["layers"] == 2 and d["ms_per_step"]["tilesafe"] > 0 and d["ms_per_step"]["torch"] > 0
    assert d["logits_relative_error"] < 1e-4               # both steps compute the same logits
    f = d["fused"]                                         # the step with the library's fused calls, beside it
    assert d["ms_per_step"]["tilesafe_fused"] > 0 and f["logits_relative_error"] < 1e-4
    assert f["next_token_matches_torch"] is True and isinstance(f["le_torch"], bool)
    assert set(r["targets"]) == {"calls_recorded", "library_calls_le_1_3x_raw", "one_kernel_calls_le_25us",
                                 "user_kernel_le_1_2x_raw", "decode_step_le_torch", "all"}
    table = capsys.readouterr().out.strip().splitlines()
    assert table[-1].startswith("targets: ") and any(line.startswith("decode step: ") for line in table)


def test_recorded_triton_launches_replay_on_the_interpreter(host_overhead, tmp_path):
    pytest.importorskip("triton")
    path = tmp_path / "host.json"
    host_overhead.main([str(path), "--device", "cpu", "--smoke", "--backend", "triton-interpreter",
                        "--cases", "add,argmax", "--skip-decode"])
    r = json.loads(path.read_text())
    rows = {row["name"]: row for row in r["calls"]}
    assert set(rows) == {"add", "argmax"} and r["decode_step"] is None
    assert rows["add"]["kernels"] == 1 and rows["argmax"]["kernels"] == 2    # argmax: partial, then final
    for row in rows.values():
        assert row["host_us"]["raw_triton"] > 0 and row["host_us"]["raw_triton_alloc"] > 0
        t = row["targets"]
        assert t["recorded"] and t["out_over_raw"] > 0 and isinstance(t["le_1_3x_raw"], bool)
    assert "le_25us" in rows["add"]["targets"] and "le_25us" not in rows["argmax"]["targets"]
    assert r["user_kernel"]["kernels"] == 1 and r["user_kernel"]["host_us"]["raw_triton"] > 0
    assert r["targets"]["calls_recorded"] == "2/2" and r["targets"]["decode_step_le_torch"] is False
