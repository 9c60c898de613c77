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
    engine = AsyncLLM(llm, kv_blocks=40, block_size=16,     # 640 tokens: fewer than 8 requests reach
                      max_num_batched_tokens=128, warm_up=False)   # compiled on first use: a short test
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


@pytest.mark.gpu
def test_bucket_graphs_replay_the_eager_steps_with_prefix_hits_and_chunked_prefill():
    """Five requests sharing a 40-token prefix, prefilled in chunks of 32 tokens a step, decode
    in the bucket of 8 (3 padding rows), then 4, 2, 1 as they finish: the captured buckets give
    exactly the tokens of the same steps run eagerly, and of the same steps launched in turn
    (no decode step launched ahead); agreement with the offline engine (bf16) is printed."""
    from tilesafe.engine.decode_step import bucket_sizes
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=256, max_num_seqs=8, progress=False)
    prefix = [1000 + 7 * j for j in range(40)]
    prompts = [prefix + [3000 + 13 * i + j for j in range(5 + 3 * i)] for i in range(5)]
    params = [SamplingParams(temperature=0, max_tokens=12 + 4 * i, ignore_eos=True) for i in range(5)]
    want = [llm.generate({"prompt_token_ids": p}, sp)[0].outputs[0].token_ids for p, sp in zip(prompts, params)]

    def serve(graphs: bool, launch_ahead: bool = True):
        core = EngineCore(llm, kv_blocks=64, block_size=16, max_num_batched_tokens=32, warm_up=False,
                          split_prefill=False, mixed_steps=False,   # the packed forward both times: only the
                          launch_ahead=launch_ahead)                # decode differs
        core.runner.decoder.use_graph = graphs
        outs = [[] for _ in prompts]
        for i, (p, sp) in enumerate(zip(prompts, params)):
            core.add(Request(f"g{i}", llm._sequences({"prompt_token_ids": p}, sp)[0],
                             sink=lambda out, i=i: outs[i].extend(out.token_ids)))
        while core.has_work():
            core.step()
        return outs, core
    replayed, core = serve(True)
    steps = core.runner.decoder.steps
    assert 8 in steps and set(steps) <= set(bucket_sizes(8))
    assert all(s.graphs.get(True) is not None for s in steps.values())   # greedy requests: the argmax step
    st = core.scheduler.blocks.stats()
    assert st.hits >= 4 and st.used == 0
    eager, _ = serve(False)
    assert replayed == eager
    assert core.ahead_steps[0] > 0                          # decode steps launched ahead, adopted
    in_turn, plain = serve(True, launch_ahead=False)
    assert in_turn == replayed and plain.ahead_steps == [0, 0]
    same = sum(g == w for g, w in zip(replayed, want))
    print(f"\nserve bf16 0.6b, prefix hits {st.hits} blocks, chunks of 32: {same}/{len(prompts)} requests "
          f"token-identical to the offline engine")
    assert [len(g) for g in replayed] == [len(w) for w in want]


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [None, "itl"])
def test_warm_up_captures_every_bucket_and_serving_then_captures_nothing(compiles, rows):
    """EngineCore(warm_up="full") on the GPU: every decode bucket captured greedy and sampled,
    every mixed step and prefill shape run, before the first request; requests of every batch
    size and prompt length then only replay and compile nothing. Without decode-step rows each
    step is one forward (the prompts beside decodes: one mixed graph); with `itl` (the default)
    prompts queue behind row steps and a step of three fresh prompts runs split (the decode
    bucket, then a prefill graph each: more forwards than steps)."""
    from tilesafe.engine.decode_step import bucket_sizes
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=128, max_num_seqs=4, progress=False)
    core = EngineCore(llm, kv_blocks=32, block_size=16, max_num_batched_tokens=32, warm_up="full",
                      decode_step_tokens=rows)
    steps = core.runner.decoder.steps
    assert sorted(steps) == bucket_sizes(4)
    graphs = {(b, g): s.graphs[g] for b, s in steps.items() for g in (True, False)}
    runs = {b: dict(s.eager_runs) for b, s in steps.items()}
    before = compiles()
    params = [SamplingParams(temperature=0 if i % 2 else 0.7, seed=i, max_tokens=6 + 3 * i, ignore_eos=True)
              for i in range(6)]
    outs = [[] for _ in params]
    for i, sp in enumerate(params):
        prompt = [500 + i + 3 * j for j in range(1 + 5 * i)]                # 1 .. 26 tokens
        core.add(Request(f"w{i}", llm._sequences({"prompt_token_ids": prompt}, sp)[0],
                         sink=lambda out, i=i: outs[i].extend(out.token_ids)))
        core.step()
    while core.has_work():
        core.step()
    assert compiles() == before                                               # no kernel compiled while serving
    assert [len(o) for o in outs] == [sp.max_tokens for sp in params]
    mixed = core.runner.mixed.steps                                           # fresh prompts beside decodes:
    assert mixed and all(m.graph is not None for m in mixed.values())          # one captured forward a step
    assert core.runner.passes == core.steps if rows is None else core.runner.passes >= core.steps
    greedy = [i for i, sp in enumerate(params) if sp.temperature == 0]
    want = {i: llm.generate({"prompt_token_ids": [500 + i + 3 * j for j in range(1 + 5 * i)]}, params[i])[0]
            .outputs[0].token_ids for i in greedy}
    same = sum(outs[i] == want[i] for i in greedy)
    print(f"\nmixed steps (prompts and decodes in one captured forward), bf16 0.6b: {same}/{len(greedy)} greedy "
          f"requests "
          f"token-identical to the offline engine")
    assert sum(outs[i][0] == want[i][0] for i in greedy) >= len(greedy) - 1   # the prefill's token (bf16 ties)
    assert {(b, g): s.graphs[g] for b, s in steps.items() for g in (True, False)} == graphs   # nothing new
    assert {b: dict(s.eager_runs) for b, s in steps.items()} == runs                       # no eager step


@pytest.mark.gpu
def test_a_burst_after_the_default_warm_up_compiles_nothing_on_the_gpu(compiles):
    """The DEFAULT warm-up on the GPU, then 8 prompts arriving together (one longer than a
    step's 32 tokens, one with a prefix hit): the scheduler keeps to the warmed shapes
    (Scheduler.max_fresh), so nothing compiles while serving and every request finishes."""
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=128, max_num_seqs=4, progress=False)
    core = EngineCore(llm, kv_blocks=40, block_size=16, max_num_batched_tokens=32)   # default warm-up
    assert core.scheduler.max_fresh == 2
    before = compiles()
    lengths = [3, 20, 45, 5, 9, 1, 24, 30]
    prompts = [[200 + (7 * i + n) % 3000 for i in range(n)] for n in lengths]
    prompts[6][:16] = prompts[1][:16]                       # one shared block: a prefix hit
    sp = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    outs = [[] for _ in prompts]
    for j, p in enumerate(prompts):
        core.add(Request(f"b{j}", llm._sequences({"prompt_token_ids": p}, sp)[0],
                         sink=lambda out, got=outs[j]: got.extend(out.token_ids)))
    while core.has_work():
        core.step()
    assert compiles() == before                             # no kernel compiled while serving
    assert [len(o) for o in outs] == [5] * len(prompts)
    assert core.scheduler.blocks.stats().hits > 0
