"""On the CPU the model gives the interpreters few, wide blocks where Qwen3's vocabulary makes
the library's small CPU tiles thousands of blocks (the LM head) and two splits of decode
attention instead of the GPU's mostly empty ones: what makes `make demo` take seconds per
token instead of tens. Both are kept here, with the tokens unchanged."""
import tilesafe.kernels as tk
from tilesafe.engine import LLM, SamplingParams


def test_lm_head_and_decode_attention_use_few_blocks_on_the_cpu(checkpoint, hf_greedy, monkeypatch):
    folder, hf = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, progress=False)
    configs = []

    def recording(real):
        def call(x, w, *args, config=None, **kwargs):
            if w is llm.model.w.lm_head:
                configs.append(config)
            return real(x, w, *args, config=config, **kwargs)
        return call
    monkeypatch.setattr(tk, "linear", recording(tk.linear))                # the prefill's LM head
    monkeypatch.setattr(tk, "linear_argmax", recording(tk.linear_argmax))  # greedy decode's
    out = llm.generate({"prompt_token_ids": [3, 17, 5]}, SamplingParams(temperature=0, max_tokens=3))[0]
    assert out.outputs[0].token_ids == hf_greedy(hf, [3, 17, 5], 3)[0]
    assert len(configs) == 3 and all(c and c["block_n"] >= 1024 for c in configs)
    ws = llm.decode_steps.steps[1].ws.attention
    assert ws.acc.shape[0] == 2                                  # splits of decode attention
