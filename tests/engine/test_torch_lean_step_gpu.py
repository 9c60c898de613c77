"""`LeanTorchQwen3Step` (engine.py --torch-step lean) on the GPU, bf16 random Qwen3-0.6B: the
engine benchmark's gate passes with it as the reference, its logits match the plain step's
within the gate's bf16 limit, and its CUDA graph captures and replays (a cache of 60 rows: the
attention mask is a slice of a 64-wide buffer).

Run on the H200: PYTHONPATH=src python -m pytest tests/engine/test_torch_lean_step_gpu.py -m gpu -q -s
"""
import math
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]

from tilesafe.engine import LLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import engine_check  # noqa: E402
from torch_qwen3 import LeanTorchQwen3Step, TorchQwen3Step  # noqa: E402

PROMPT = [151, 2000, 30000, 7, 99, 1234, 5678, 42, 300, 301, 302, 303, 9000, 12, 13, 14]


@pytest.fixture(scope="module")
def llm():
    return LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=60, max_num_seqs=1,
                           progress=False)


def test_gate_passes_with_the_lean_step_as_reference(llm):
    r = engine_check.check(llm, LeanTorchQwen3Step(llm, 60), PROMPT, 16)
    print({k: r[k] for k in ("first_step", "rows", "why")})
    assert r["passed"], r["why"]
    assert r["first_step"]["max_rel"] < engine_check.REL_LIMIT


def test_lean_logits_match_the_plain_step_in_bf16(llm):
    seq = PROMPT + [5, 6, 7, 8]
    plain = TorchQwen3Step(llm, 60).teacher_forced_logits(seq)
    lean = LeanTorchQwen3Step(llm, 60).teacher_forced_logits(seq)
    err = engine_check.logit_error(lean, plain)
    print(err["max_abs"], err["max_rel"])
    assert err["max_rel"] < engine_check.REL_LIMIT
    forced = engine_check.agreement(plain, lean.argmax(-1).tolist(), err["max_abs"])
    assert forced["disagree_at"] == []


def test_lean_graph_captures_and_replays(llm):
    step = LeanTorchQwen3Step(llm, 60)
    s = step.step_seconds(40, reps=5)
    assert math.isfinite(s) and 0 < s < 1
    tokens = step.greedy(PROMPT[:4], 3)                     # replays the captured graph
    _, eager_logits = LeanTorchQwen3Step(llm, 60).greedy_logits(PROMPT[:4], 3)
    assert len(tokens) == 3
    scale = float(eager_logits.abs().max())                 # the graph runs the eager step's kernels
    assert engine_check.agreement(eager_logits, tokens, 1e-2 * scale)["disagree_at"] == []
