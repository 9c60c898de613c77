"""The serving engine over its paged KV cache, on the tiny float32 model against the offline
engine run on each prompt alone: prompts sharing a prefix share its blocks (fewer blocks,
the shared tokens not computed again) and still get their own tokens; long prompts
prefilled in chunks beside running decodes get the unchunked tokens; decode batches padded
to their bucket get the unpadded tokens."""
import pytest

from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
SEEDED = SamplingParams(temperature=0.9, top_p=0.9, max_tokens=4, seed=3, ignore_eos=True)


@pytest.fixture(scope="module")
def alone(llm_one_seq):
    return lambda ids, params: llm_one_seq.generate({"prompt_token_ids": ids}, params)[0].outputs[0].token_ids


def add(core, llm, name, ids, params):
    """A request on the engine core; returns it and the list its outputs' tokens land in."""
    got = []
    req = Request(name, llm._sequences({"prompt_token_ids": ids}, params)[0],
                  sink=lambda out: got.extend(out.token_ids))
    core.add(req)
    return req, got


def drain(core):
    while core.has_work():
        core.step()


PREFIX = [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43]      # 13 tokens: 3 full blocks of 4


def test_prompts_sharing_a_prefix_share_its_blocks_and_get_their_own_tokens(llm, alone):
    prompts = [PREFIX + [20 + i, 50 + i] for i in range(3)]          # 15 tokens: 4 blocks each
    params = [GREEDY, SEEDED, GREEDY]
    used = {}
    for caching in (True, False):
        core = EngineCore(llm, kv_blocks=32, block_size=4, prefix_caching=caching)
        first, got0 = add(core, llm, "p0", prompts[0], params[0])
        drain(core)                            # its prompt's full blocks are in the cache now
        reqs = [add(core, llm, f"p{i}", prompts[i], params[i]) for i in (1, 2)]
        core.step()                            # both admitted and prefilled in one step
        used[caching] = core.scheduler.blocks.stats().used
        if not caching:
            break
        assert [r.cached for r, _ in reqs] == [12, 12] and first.cached == 0   # 3 blocks of 4 not computed
        t1, t2 = (core.scheduler.blocks.block_table(r.request_id) for r, _ in reqs)
        assert t1[:3] == t2[:3] and t1[3] != t2[3]
        assert all(core.scheduler.blocks.ref_count(b) == 2 for b in t1[:3])
        drain(core)
        assert [got0] + [g for _, g in reqs] == [alone(p, sp) for p, sp in zip(prompts, params)]
        st = core.scheduler.blocks.stats()
        assert st.used == 0 and st.hits == 6
    assert used == {True: 5, False: 8}         # 3 shared + 2 own blocks, against 4 + 4


def test_a_prompt_cached_but_for_its_last_token_goes_straight_to_decode(llm, alone, monkeypatch):
    core = EngineCore(llm, kv_blocks=32, block_size=4)
    ids = PREFIX[:9]                           # 9 tokens: 2 full blocks cached, 1 token to compute
    add(core, llm, "a", ids, GREEDY)
    drain(core)
    monkeypatch.setattr(core.runner, "prefill", None)    # b must not prefill at all
    req, got = add(core, llm, "b", ids, GREEDY)
    core.step()
    assert req.cached == 8 and len(req.seq.tokens) == 1   # its token (sent while the next step runs)
    drain(core)
    assert got == alone(ids, GREEDY)


def test_chunked_prefill_gives_the_unchunked_tokens(llm, alone, monkeypatch):
    prompts = [[(7 * i + 3) % 90 + 1 for i in range(22)], [4, 9], [(5 * i) % 80 + 2 for i in range(9)]]
    params = [GREEDY, SEEDED, SEEDED]
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=4)
    chunks, mixed = [], []
    step = core.runner.step

    def record(plan_chunks, decode, while_running=None):
        chunks.append([(r.request_id, r.computed, n) for r, n in plan_chunks])
        mixed.append(len(decode) if plan_chunks else 0)
        return step(plan_chunks, decode, while_running)
    monkeypatch.setattr(core.runner, "step", record)
    outs = [add(core, llm, f"c{i}", p, sp)[1] for i, (p, sp) in enumerate(zip(prompts, params))]
    drain(core)
    assert outs == [alone(p, sp) for p, sp in zip(prompts, params)]
    long = [(c, n) for step in chunks for rid, c, n in step if rid == "c0"]
    assert long[0] == (0, 4) and len(long) >= 6 and sum(n for _, n in long) == 22
    assert all(sum(n for *_, n in step) <= 4 for step in chunks)
    # Chunks ran beside decodes, and every step was one forward pass (the chunks and the
    # decode rows together), not a prefill pass and then a decode pass; the decode rows of
    # a mixed step attend in one paged_decode_attention launch when there are two or more.
    assert sum(n > 0 for n in mixed) >= 3 and max(mixed) >= 2 and core.runner.passes == core.steps


def test_decode_batches_padded_to_their_bucket_give_the_unpadded_tokens(llm, alone):
    prompts = [[2, 4, 6], [8, 10], [12, 14, 16, 18]]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (3, 6, 9)]
    params[1] = SamplingParams(temperature=0.8, top_k=20, max_tokens=6, seed=11, ignore_eos=True)
    got = {}
    for pad in (True, False):
        core = EngineCore(llm, kv_blocks=32, block_size=4, pad_decode=pad)
        outs = [add(core, llm, f"d{i}", p, sp)[1] for i, (p, sp) in enumerate(zip(prompts, params))]
        drain(core)
        got[pad] = (outs, sorted(core.runner.decoder.steps))
    assert got[True][0] == got[False][0] == [alone(p, sp) for p, sp in zip(prompts, params)]
    assert got[True][1] == [1, 2, 4] and got[False][1] == [1, 2, 3]   # 3 requests run in the bucket of 4


def test_bad_engine_settings_are_refused(llm):
    from tilesafe.engine import RequestError
    with pytest.raises(RequestError, match="max_num_batched_tokens 2 is below max_num_seqs 4"):
        EngineCore(llm, max_num_batched_tokens=2)
    with pytest.raises(RequestError, match="block_size must be a positive int, got 0"):
        EngineCore(llm, block_size=0)


def test_the_pool_reuses_the_offline_cache_when_it_holds_the_blocks(llm):
    """The LLM's (4 slots x 32 positions) buffers hold 32 blocks of 4: the pool is a view of
    them; 40 blocks do not fit and get their own buffers."""
    shared = EngineCore(llm, kv_blocks=32, block_size=4).runner
    assert shared.shares_llm_cache and shared.cache.k[0].data_ptr() == llm.model.cache.k[0].data_ptr()
    assert tuple(shared.cache.k[0].shape) == (32, 4, 2, 16)
    own = EngineCore(llm, kv_blocks=40, block_size=4).runner
    assert not own.shares_llm_cache and tuple(own.cache.v[0].shape) == (40, 4, 2, 16)
    assert float(own.cache.k[0].abs().sum()) == 0.0          # a new pool starts zeroed


def test_preemption_prefix_hits_and_chunks_together_still_give_each_prompts_tokens(llm, alone):
    """A cache of 9 blocks of 4 (36 tokens) for 4 requests growing to 25 tokens, sharing an
    8-token prefix, 4 tokens a step: requests are preempted, readmitted on prefix hits
    (their own earlier blocks too) and prefilled in chunks."""
    prompts = [PREFIX[:8] + [60 + i] * (1 + i) for i in range(4)]
    params = [SamplingParams(temperature=0.9 * (i % 2), max_tokens=12, seed=i, ignore_eos=True) for i in range(4)]
    core = EngineCore(llm, kv_blocks=9, block_size=4, max_num_batched_tokens=4)
    outs = [add(core, llm, f"x{i}", p, sp)[1] for i, (p, sp) in enumerate(zip(prompts, params))]
    drain(core)
    assert outs == [alone(p, sp) for p, sp in zip(prompts, params)]
    st = core.scheduler.blocks.stats()
    assert core.preemptions > 0 and st.hits > 0 and st.used == 0
