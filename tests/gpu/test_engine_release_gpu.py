"""A dropped LLM gives its GPU memory back at once: its weights and KV cache die with it.

Round 0 of session 17 built benchmarks/engine.py's second 32B engine beside the first one's
68 GB: the runtime's HOLDING kept the last launches' completions, and a graph replay's
completion holds every tensor of its graph, until some 32 later launches swept them. An LLM
on a GPU now waits for the device and releases them when it is dropped
(`runtime.future.synchronize_and_release`).

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_engine_release_gpu.py -m gpu -q
"""
import gc
import weakref

import pytest
import torch

from tilesafe.engine import LLM, SamplingParams

pytestmark = pytest.mark.gpu

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.mark.parametrize("use_graph", [True, False])
def test_a_dropped_llm_frees_its_weights_and_cache(use_graph):
    gc.collect()
    torch.cuda.synchronize()
    llm = LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=128, max_num_seqs=2,
                          use_graph=use_graph, progress=False)
    prompt = {"prompt_token_ids": list(range(100, 120))}
    llm.generate([prompt, prompt], GREEDY)            # prefill and decode graphs captured and replayed
    llm.generate(prompt, GREEDY)
    held = [weakref.ref(t) for t in (llm.model.w.embed, llm.model.cache.k[0], llm.model.cache.v[-1])]
    nbytes = sum(r().numel() * r().element_size() for r in held)
    torch.cuda.synchronize()
    with_llm = torch.cuda.memory_allocated()
    del llm
    gc.collect()
    assert [r() for r in held] == [None] * len(held), "the weights or the cache outlived the LLM"
    assert with_llm - torch.cuda.memory_allocated() >= nbytes
