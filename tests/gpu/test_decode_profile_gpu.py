"""The decode step's profile (`benchmarks/decode_profile.py`, what `benchmarks/engine.py`
records as step_profile) on the H200: a random Qwen3-0.6B's batch-1 greedy graph traced with
PDL and captured again without it. Both traces hold the step's kernels in the same order,
own times and gaps add up to the span, the weight kernels stream the model's weights once,
and the plain capture leaves the engine's own graph replaying the same tokens.

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_decode_profile_gpu.py -m gpu -q
"""
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import decode_profile as dp  # noqa: E402

from tilesafe.engine import LLM, SamplingParams  # noqa: E402
from tilesafe.engine.checkpoint import weight_bytes  # noqa: E402


def test_the_profile_of_a_real_step():
    llm = LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=128, max_num_seqs=1,
                          progress=False)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompt = [{"prompt_token_ids": list(range(1000, 1032))}]
    before = llm.generate(prompt, params)[0].outputs[0].token_ids
    assert llm.decode_steps.pdl                              # the engine's graphs use PDL on the H200
    p = dp.profile_step(llm, context=40, ideal_s=1e-4, step_s=None, replays=3)
    plain, pdl = p["plain"], p["pdl"]
    assert plain["launches"] == pdl["launches"] > 4 * llm.config.num_layers
    for t in (plain, pdl):
        assert t["own_us"] + t["gap_us"] == pytest.approx(t["span_us"], rel=0.02, abs=2.0)
        assert t["by_kind"]["lm_head"]["launches"] == 1
    streamed = plain["by_kind"]["gemv"]["bytes"] + plain["by_kind"]["lm_head"]["bytes"]
    assert streamed == pytest.approx(weight_bytes(llm.config, 2), rel=0.01)   # tied: the LM head is the embedding
    layers = plain["per_position"]
    assert layers and any(r["kernel"].startswith("paged_decode") for r in layers)
    assert 0.3 < p["summary"]["gemv_TB_s"] < 6.0
    after = llm.generate(prompt, params)[0].outputs[0].token_ids
    assert after == before
    del llm
    torch.cuda.empty_cache()


def test_the_profile_of_a_batch_step():
    """Batch 4 (the unfused layer, the LM head a plain GEMM, then the sampler): the weight
    kernels stream the weights once for all four rows, one LM head, the sampler its own kind."""
    llm = LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=128, max_num_seqs=4,
                          progress=False)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    llm.generate([{"prompt_token_ids": list(range(1000 + i, 1032 + i))} for i in range(4)], params)
    p = dp.profile_step(llm, context=40, ideal_s=1e-4, step_s=None, replays=3, batch=4)
    assert p is not None and p["batch"] == 4
    plain = p["plain"]
    assert plain["by_kind"]["lm_head"]["launches"] == 1 and plain["by_kind"]["sampler"]["launches"] >= 1
    streamed = plain["by_kind"]["gemv"]["bytes"] + plain["by_kind"]["lm_head"]["bytes"]
    assert streamed == pytest.approx(weight_bytes(llm.config, 2), rel=0.02)
    assert any(r["kernel"].startswith("paged_decode") for r in plain["per_position"])
    del llm
    torch.cuda.empty_cache()
