"""The correctness gate of `benchmarks/engine.py` (`engine_check.check`) on a tiny float32
random Qwen3 on the CPU: it passes for the engine against the PyTorch baseline and
transformers on the same weights; it fails when the engine computes something else (its
final-norm gain 1.5x: every logit 1.5x, the argmax unchanged, so only the logit error can
catch it) and when the baselines disagree with each other (nothing can vouch)."""
import dataclasses
import sys
from pathlib import Path

import pytest

from tilesafe.engine import LLM
from tilesafe.engine.random_checkpoint import qwen3_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import engine_check  # noqa: E402
from hf_qwen3 import HFQwen3  # noqa: E402
from torch_qwen3 import TorchQwen3Step  # noqa: E402

PROMPT = [151, 2000, 30000, 7]


@pytest.fixture(scope="module")
def llm():
    return LLM.from_random("tiny", device="cpu", dtype="float32", max_model_len=16, max_num_seqs=1, progress=False)


def test_gate_passes_for_the_engine_against_both_references(llm):
    r = engine_check.check(llm, TorchQwen3Step(llm, 16), PROMPT, 2, HFQwen3(llm, qwen3_config("tiny")))
    assert r["passed"], r["why"]
    assert r["first_step"]["max_rel"] < 1e-4 and r["first_step"]["top1_agree"]
    assert r["transformers"]["vs_baseline"]["max_rel"] < 1e-4
    assert r["torch_prefill_vs_baseline"]["max_rel"] < 1e-4
    assert r["teacher_forced"]["engine_tokens"] == r["baseline_tokens"]     # float32: no near-tie flips
    assert r["teacher_forced"]["decisive"] == 2 and r["teacher_forced"]["disagree_at"] == []


def test_gate_fails_when_the_engine_logits_differ(llm):
    baseline = TorchQwen3Step(llm, 16)                  # the references keep the right weights
    right = llm.model.w
    llm.model.w = dataclasses.replace(right, norm=right.norm * 1.5)
    try:
        r = engine_check.check(llm, baseline, PROMPT, 2)
    finally:
        llm.model.w = right
    assert not r["passed"]
    assert r["first_step"]["max_rel"] == pytest.approx(0.5, rel=1e-3)      # |1.5 x - x| / |x|
    assert "of their scale (limit 0.05)" in r["why"]


def test_gate_fails_when_the_baselines_disagree(llm):
    wrong = TorchQwen3Step(llm, 16)
    hf = HFQwen3(llm, qwen3_config("tiny"))             # the engine's (right) weights
    wrong.w = dataclasses.replace(wrong.w, norm=wrong.w.norm * 1.5)
    r = engine_check.check(llm, wrong, PROMPT, 1, hf)
    assert not r["passed"] and "the baselines cannot vouch" in r["why"]
