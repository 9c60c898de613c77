"""benchmarks/host_decode_calls.py runs on the CPU (`--device cpu --smoke`): the eager decode
step's library calls are timed one by one, and every launch of a warmed step takes its
plan's fast form (none falls back to the full step). The times mean nothing here."""
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
