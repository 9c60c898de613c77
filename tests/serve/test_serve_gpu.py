"""The serving engine on the GPU (H200, `-m gpu`): a 0.6B-shaped random Qwen3 in bf16,
concurrent requests through AsyncLLM (decode steps captured in `ts.graph()` on the engine
thread, a KV capacity small enough to preempt) against the offline engine on the same
weights. bf16 near-ties may flip a greedy choice between batch shapes, so token agreement is
measured and printed, not required; shapes, lengths, capacity and the first tokens are."""
import asyncio

import pytest
import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.serve import AsyncLLM


@pytest.mark.gpu
def test_async_engine_on_the_gpu_matches_the_offline_engine():
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=512, max_num_seqs=8, progress=False)
    prompts = [[100 + (37 * i + 11 * j) % 5000 for j in range(8 + 5 * i)] for i in range(12)]
    greedy = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    want = [llm.generate({"prompt_token_ids": p}, greedy)[0].outputs[0].token_ids for p in prompts]
    engine = AsyncLLM(llm, kv_blocks=40, block_size=16)     # 640 tokens: fewer than 8 requests reach
    try:
        async def one(p, i):
            toks = []
            async for out in engine.generate({"prompt_token_ids": p}, greedy, f"g{i}"):
                toks += out.token_ids
            return toks

        async def run():
            return await asyncio.gather(*[one(p, i) for i, p in enumerate(prompts)])
        got = asyncio.run(run())
        stats = engine.stats()
    finally:
        engine.shutdown()
    assert all(len(g) == 48 for g in got)
    same = sum(g == w for g, w in zip(got, want))
    first_diff = [next((k for k, (a, b) in enumerate(zip(g, w)) if a != b), None) for g, w in zip(got, want)]
    print(f"\nserve bf16 0.6b: {same}/{len(prompts)} requests token-identical to the offline engine; "
          f"first divergence per request {first_diff}; preemptions {stats['preemptions']}")
    assert sum(g[0] == w[0] for g, w in zip(got, want)) >= len(prompts) - 1   # the prefill's token
    assert (stats["running"], stats["waiting"], stats["kv_blocks_used"]) == (0, 0, 0)
    assert torch.cuda.is_available()
