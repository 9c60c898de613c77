"""`LLM.score` on the GPU, on the 0.6B shape with random bf16 weights (the shape the other
engine GPU tests run): the decode path gives exactly the tokens and log-probabilities of
greedy `generate` (the same prefill graph and decode steps), and the prefill path's logits
(one eager pass, copied to the host) pick the same tokens wherever the choice is not a bf16
near-tie. The comparison with transformers runs on the CPU (tests/engine/test_score.py).

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_engine_score_gpu.py -m gpu -q
"""
import pytest
import torch

from tilesafe.engine import LLM, SamplingParams

pytestmark = pytest.mark.gpu

PROMPT = list(range(1000, 1016))
MARGIN = 1.0            # top-2 logit gap beyond any bf16 difference of two passes at 0.6B


def test_score_on_the_gpu_agrees_with_generate():
    llm = LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=128, max_num_seqs=2,
                          progress=False)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=1)
    out = llm.generate({"prompt_token_ids": PROMPT}, params)[0].outputs[0]
    tokens = out.token_ids
    logprobs = [next(iter(d.values())).logprob for d in out.logprobs]
    d = llm.score(PROMPT, tokens, through="decode")
    assert d.greedy == tokens
    assert d.greedy_logprobs == pytest.approx(logprobs, abs=1e-5)
    s = llm.score(PROMPT, tokens)
    assert s.logits.shape == (len(tokens), 151936) and s.logits.device.type == "cpu"
    assert torch.isfinite(s.logits).all()
    top = s.logits.topk(2, dim=-1).values
    decisive = [i for i in range(len(tokens)) if top[i, 0] - top[i, 1] > MARGIN]
    assert [s.greedy[i] for i in decisive] == [tokens[i] for i in decisive]
    print(f"\nscore on the GPU: {len(decisive)}/{len(tokens)} decisive rows agree with generate")
    assert llm.generate({"prompt_token_ids": PROMPT}, params)[0].outputs[0].token_ids == tokens   # still works
