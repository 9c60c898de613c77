"""The correctness gate of `benchmarks/engine.py` on the GPU: a bf16 random Qwen3-0.6B (all 28
layers, built on the device) passes it against the PyTorch baseline and transformers on the
same weights, with at least one decisive teacher-forced step, and an engine whose final-norm
gain is 1.5x fails it.

Run on the H200: PYTHONPATH=src python -m pytest tests/engine/test_engine_bench_gate_gpu.py -m gpu -q -s
"""
import dataclasses
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]

from tilesafe.engine import LLM  # noqa: E402
from tilesafe.engine.random_checkpoint import qwen3_config  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import engine_check  # noqa: E402
from hf_qwen3 import HFQwen3  # noqa: E402
from torch_qwen3 import TorchQwen3Step  # noqa: E402

PROMPT = [151, 2000, 30000, 7, 99, 1234, 5678, 42, 300, 301, 302, 303, 9000, 12, 13, 14]


@pytest.fixture(scope="module")
def llm():
    return LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=64, max_num_seqs=1,
                           progress=False)


def test_gate_passes_in_bf16(llm):
    r = engine_check.check(llm, TorchQwen3Step(llm, 64), PROMPT, 16, HFQwen3(llm, qwen3_config("0.6b")))
    print({k: r[k] for k in ("first_step", "rows", "why")}, r["transformers"]["vs_baseline"])
    assert r["passed"], r["why"]
    assert r["first_step"]["max_rel"] < engine_check.REL_LIMIT
    assert r["teacher_forced"]["decisive"] >= 1


def test_gate_fails_on_wrong_engine_logits_in_bf16(llm):
    baseline = TorchQwen3Step(llm, 64)                  # the references keep the right weights
    right = llm.model.w
    llm.model.w = dataclasses.replace(right, norm=right.norm * 1.5)   # the eager prefill reads it
    try:
        r = engine_check.check(llm, baseline, PROMPT, 4)
    finally:
        llm.model.w = right
    assert not r["passed"] and r["first_step"]["max_rel"] > 0.4, r["why"]
