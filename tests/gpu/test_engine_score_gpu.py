"""`LLM.score` on the GPU: a tiny float32 checkpoint written by transformers (weights at scale
0.5: no near-ties), its prefill logits against transformers' forward on the GPU, and the
greedy tokens of the decode path (captured graphs) against the prefill's.

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_engine_score_gpu.py -m gpu -q
"""
import pytest
import torch

from tilesafe.engine import LLM

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

PROMPT = [3, 17, 5, 60, 2]
CONTINUATION = [8, 41, 41, 90, 0, 13, 77, 5]


def test_score_on_the_gpu_matches_transformers_and_its_decode_path(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.5,
                                   max_position_embeddings=64, rope_theta=10000.0)
    hf = transformers.Qwen3ForCausalLM(cfg).float().eval()
    hf.save_pretrained(tmp_path)
    llm = LLM(str(tmp_path), device="cuda", dtype="float32", max_model_len=32, max_num_seqs=2, progress=False)
    with torch.no_grad():
        want = hf(torch.tensor([PROMPT + CONTINUATION[:-1]])).logits[0, len(PROMPT) - 1:].float()
    s = llm.score(PROMPT, CONTINUATION)
    assert s.logits.shape == want.shape and s.logits.device.type == "cpu"
    scale = want.abs().max().item()
    assert (s.logits - want).abs().max().item() < 2e-3 * scale
    assert s.greedy == want.argmax(-1).tolist()
    d = llm.score(PROMPT, CONTINUATION, through="decode")
    assert d.greedy == s.greedy
    assert d.greedy_logprobs == pytest.approx(s.greedy_logprobs, abs=1e-3)
