"""The compiled PyTorch steps (engine.py --torch-step compiled_mm, the default, compiled and
compiled_glue) on the GPU, bf16 random Qwen3-0.6B: Dynamo compiles the per-layer function once
for all 28 layers (one graph, no recompile per layer), their logits match the plain step's within
the gate's bf16 limit; compiled_mm's CUDA graph captures (Dynamo told to fail on a recompile) and
replays the eager step's tokens, and the gate passes with it as the reference.

Run on the H200: PYTHONPATH=src python -m pytest tests/engine/test_torch_compiled_step_gpu.py -m gpu -q -s
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
from torch_qwen3 import (CompiledGlueTorchQwen3Step, CompiledMmTorchQwen3Step, CompiledTorchQwen3Step,  # noqa: E402
                         TorchQwen3Step)

PROMPT = [151, 2000, 30000, 7, 99, 1234, 5678, 42, 300, 301, 302, 303, 9000, 12, 13, 14]


@pytest.fixture(scope="module")
def llm():
    return LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=60, max_num_seqs=1,
                           progress=False)


@pytest.mark.parametrize("cls", [CompiledTorchQwen3Step, CompiledMmTorchQwen3Step, CompiledGlueTorchQwen3Step])
def test_compiled_logits_match_the_plain_step_and_compile_once(llm, cls):
    seq = PROMPT + [5, 6, 7, 8]
    plain = TorchQwen3Step(llm, 60).teacher_forced_logits(seq)
    step = cls(llm, 60)
    got = step.teacher_forced_logits(seq)
    err = engine_check.logit_error(got, plain)
    print(cls.__name__, step.compile_s, step.graphs, err["max_abs"], err["max_rel"])
    # one graph per compiled function (0 if this process compiled it already), not one per layer
    assert step.graphs <= (1 if cls.whole else 3)
    assert err["max_rel"] < engine_check.REL_LIMIT
    assert engine_check.agreement(plain, got.argmax(-1).tolist(), err["max_abs"])["disagree_at"] == []


def test_compiled_graph_captures_and_replays_the_eager_tokens(llm):
    step = CompiledMmTorchQwen3Step(llm, 60)                # engine.py's default --torch-step
    s = step.step_seconds(40, reps=5)
    assert math.isfinite(s) and 0 < s < 1
    tokens = step.greedy(PROMPT[:4], 3)                     # replays the captured graph
    _, eager_logits = CompiledMmTorchQwen3Step(llm, 60).greedy_logits(PROMPT[:4], 3)
    scale = float(eager_logits.abs().max())
    assert engine_check.agreement(eager_logits, tokens, 1e-2 * scale)["disagree_at"] == []


def test_gate_passes_with_the_compiled_step_as_reference(llm):
    r = engine_check.check(llm, CompiledMmTorchQwen3Step(llm, 60), PROMPT, 16)
    print({k: r[k] for k in ("first_step", "rows", "why")})
    assert r["passed"], r["why"]
