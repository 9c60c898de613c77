"""benchmarks/tune_h200.py: the winner rule, and a dry run of every shape class at tiny sizes."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tuner():
    spec = importlib.util.spec_from_file_location("tune_h200", ROOT / "benchmarks" / "tune_h200.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module           # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _rec(*entries):
    return {"candidates": [{"config": c, "score_us": t} for c, t in entries]}


def test_fastest_candidate_wins(tuner):
    a, b = {"block_n": 16}, {"block_n": 32}
    assert tuner.winner(_rec((a, 10.0), (b, 9.0)))["config"] == b
    assert tuner.winner({"candidates": [{"config": a, "error": "OutOfResources"}]}) is None


def test_forced_tma_gives_way_to_the_automatic_choice_within_noise(tuner):
    auto, forced = {"block_m": 64}, {"block_m": 64, "tma": True}
    assert tuner.winner(_rec((auto, 10.05), (forced, 10.0)))["config"] == auto      # 0.5%: a tie
    assert tuner.winner(_rec((auto, 10.5), (forced, 10.0)))["config"] == forced     # 5%: a real win
    off = {"block_m": 64, "tma": False}
    assert tuner.winner(_rec((auto, 10.05), (off, 10.0)))["config"] == auto


def test_dry_run_tunes_every_class_at_tiny_sizes(tuner, tmp_path, monkeypatch):
    out = tmp_path / "cpu.json"
    monkeypatch.setattr(sys, "argv", ["tune_h200.py", "--dry-run", "--out", str(out)])
    monkeypatch.setattr(tuner.configs, "tuned_table", tuner.configs.tuned_table)   # main() replaces it
    assert tuner.main() == 0
    table = json.loads(out.read_text())
    assert {"matmul", "linear", "attention", "decode", "elementwise"} <= set(table)
    assert any(key.endswith("/gemv") for key in table["linear"])        # one-row GEMVs: their own class
