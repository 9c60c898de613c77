"""After the server's DEFAULT start-up warm-up (decode buckets, mixed steps of one and two
fresh prompts, and the later chunks of a prompt longer than the step's budget), the
scheduler keeps every step to those shapes (Scheduler.max_fresh): a burst of clients, a
prompt longer than a chunk and a prefix-cache hit compile nothing while serving."""
from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request


def test_a_burst_after_the_default_warm_up_compiles_nothing(llm, llm_one_seq, compiles):
    """Old code: a step admitted all the burst's fresh prompts it could (3-4 chunks: steps the
    default warm-up never ran) and a prefix hit or a later chunk ran an unwarmed packed step."""
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, warm_up=True,  # default level
                      mixed_steps=True, split_prefill=True)       # the kinds of step a GPU runs
    assert core.scheduler.max_fresh == 2
    assert float(core.runner.cache.k[0].abs().sum()) == 0.0      # warm-up's padding rows wrote no KV
    before = compiles()
    greedy = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    seeded = SamplingParams(temperature=0.8, seed=3, max_tokens=3, ignore_eos=True)
    lengths = [3, 12, 20, 5, 9, 1, 14, 7]             # 20: longer than a step's 16 tokens
    prompts = [[(7 * i + n) % 90 + 1 for i in range(n)] for n in lengths]
    prompts[6][:12] = prompts[1][:12]                  # a prefix hit: prompt 1's three blocks
    params = [seeded if j % 3 == 1 else greedy for j in range(len(prompts))]
    outs = [[] for _ in prompts]
    for j, p in enumerate(prompts):                    # all arrive together
        core.add(Request(f"b{j}", llm._sequences({"prompt_token_ids": p}, params[j])[0],
                         sink=lambda out, got=outs[j]: got.extend(out.token_ids)))
    while core.has_work():
        core.step()
    assert compiles() == before
    assert core.scheduler.blocks.stats().hits > 0
    want = [llm_one_seq.generate({"prompt_token_ids": p}, sp)[0].outputs[0].token_ids
            for p, sp in zip(prompts, params)]
    assert outs == want
