"""benchmarks/host_decode_calls.py runs on the CPU (`--device cpu --smoke`): the eager decode
step's library calls are timed one by one, and every launch of a warmed step takes its
plan's fast form (none falls back to the full step), for the unfused and the fused step; the
replay of the step's calls (in order, and each alone) covers every call. The times mean
nothing here."""
import re

import pytest


@pytest.fixture
def host_decode_calls(benchmark_module):
    return benchmark_module("host_decode_calls", "decode_step")


def test_smoke_run_times_each_function_and_every_launch_takes_the_fast_form(host_decode_calls, capsys):
    host_decode_calls.main(["--device", "cpu", "--smoke", "--steps", "1", "--top", "5"])
    out = capsys.readouterr().out
    assert "Traceback" not in out
    for name in ("embedding", "rms_norm", "linear", "rope", "decode_attention", "silu_mul", "argmax"):
        assert re.search(rf"^{name}\s+\d+\s+[\d.]+\s+[\d.]+$", out, re.M), name
    starts = re.search(r"^launches per step: (.*)$", out, re.M).group(1)
    assert re.fullmatch(r"fast form \d+", starts), starts        # no full step, no declined launch
    replayed = out[out.index("library calls replayed"):]          # in the step's order, and each alone
    assert re.search(r"^all\s+28\s+[\d.]+\s+[\d.]+$", replayed, re.M), replayed
    assert "per step: no CUDA event recorded, no prune, no sweep" in out      # the CPU: no events


def test_the_fused_step_runs_on_its_fast_forms_too(host_decode_calls, capsys):
    host_decode_calls.main(["--device", "cpu", "--smoke", "--steps", "1", "--top", "5", "--fused"])
    out = capsys.readouterr().out
    assert "Traceback" not in out
    for name in ("rms_norm_linear", "norm_rope", "linear", "decode_attention", "silu_mul_linear", "linear_argmax"):
        assert re.search(rf"^{name}\s+\d+\s+[\d.]+\s+[\d.]+$", out, re.M), name
    starts = re.search(r"^launches per step: (.*)$", out, re.M).group(1)
    assert re.fullmatch(r"fast form \d+", starts), starts
