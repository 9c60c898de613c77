"""Continuous batching: the scheduler's admission, preemption and release rules (pure
Python), and AsyncLLM on the tiny model against the offline engine — a deliberately small
KV cache that forces preemption by recomputation, aborts that free capacity at once,
seeded sampling beside other requests, shutdown."""
import asyncio
import contextlib
from types import SimpleNamespace

import pytest

import tilesafe as ts
from tilesafe.engine import LLM, RequestError, SamplingParams
from tilesafe.serve import AsyncLLM
from tilesafe.serve.request import Request
from tilesafe.serve.scheduler import Scheduler


def req(rid, n_prompt, order, generated=()):
    seq = SimpleNamespace(prompt_ids=list(range(n_prompt)), tokens=list(generated))
    return Request(rid, seq, sink=lambda out: None, order=order)


def test_scheduler_admits_in_order_and_the_head_is_not_overtaken():
    s = Scheduler(max_num_seqs=4, max_model_len=16, num_blocks=6, block_size=4)
    a, b, c = req("a", 8, 1), req("b", 13, 2), req("c", 2, 3)
    for r in (a, b, c):
        s.add(r)
    assert s.admit() == [a]                    # b needs 4 blocks + 1 headroom for a: 5 > 4 free
    assert list(s.waiting) == [b, c]           # c would fit, but does not pass b
    assert (a.slot, s.blocks.stats().used) == (0, 2)
    s.finish(a)
    assert s.admit() == [b, c] and (b.slot, c.slot) == (0, 1)
    assert s.blocks.stats().used == 5


def test_scheduler_preempts_the_latest_and_requeues_it_first():
    s = Scheduler(max_num_seqs=3, max_model_len=16, num_blocks=4, block_size=4)
    a, b = req("a", 4, 1, generated=[7]), req("b", 3, 2, generated=[7])
    for r in (a, b):
        s.add(r)
    assert s.admit() == [a, b]                 # a: 5 tokens = 2 blocks, b: 4 tokens = 1 block
    b.seq.tokens.append(8)                     # a feeds its 5th token, b its 4th: a new block, the last
    assert s.reserve_decode([a, b]) == []
    assert s.blocks.stats().free == 0
    a.seq.tokens += [8, 9]
    s.blocks.append("a", [8, 9])               # a fills its second block (8 tokens)
    assert s.reserve_decode([a, b]) == [b]     # a's 9th token needs a block: b (the latest) goes
    assert b.slot is None and list(s.waiting) == [b] and b.preemptions == 1
    assert s.blocks.num_tokens("a") == 9 and s.blocks.stats().used == 3
    s.finish(a)
    assert s.admit() == [b] and b.slot == 0
    assert s.blocks.num_tokens("b") == len(b.kv_tokens) == 5     # recomputed: prompt + its generated tokens


@pytest.fixture(scope="module")
def llm(word_model):
    return LLM(str(word_model), device="cpu", max_model_len=32, max_num_seqs=4, progress=False)


@pytest.fixture(scope="module")
def alone(word_model):
    one = LLM(str(word_model), device="cpu", max_model_len=32, max_num_seqs=1, progress=False)
    return lambda prompt, params: one.generate(prompt, params)[0].outputs[0]


async def collect(engine, prompt, params, rid):
    outs = [o async for o in engine.generate(prompt, params, rid)]
    return "".join(o.text for o in outs), sum((o.token_ids for o in outs), []), outs[-1]


def test_small_cache_preempts_and_still_returns_each_prompts_tokens(llm, alone):
    prompts = [{"prompt_token_ids": [1 + i, 20 + i, 40 + i][: 1 + i % 3]} for i in range(6)]
    params = [SamplingParams(temperature=0, max_tokens=10, ignore_eos=True),
              SamplingParams(temperature=0.9, top_p=0.9, max_tokens=10, seed=7, ignore_eos=True)]
    want = [alone(p, params[i % 2]).token_ids for i, p in enumerate(prompts)]
    engine = AsyncLLM(llm, kv_blocks=8, block_size=4)          # 32 tokens: less than 4 sequences need
    try:
        async def run():
            return await asyncio.gather(*[collect(engine, p, params[i % 2], f"r{i}") for i, p in enumerate(prompts)])
        got = asyncio.run(run())
        assert [g[1] for g in got] == want
        st = engine.stats()
        assert st["preemptions"] > 0
        assert (st["running"], st["waiting"], st["kv_blocks_used"]) == (0, 0, 0)
    finally:
        engine.shutdown()


def test_abort_and_leaving_the_stream_free_capacity_at_once(llm, alone):
    engine = AsyncLLM(llm)
    try:
        long = SamplingParams(temperature=0, max_tokens=25, ignore_eos=True)

        async def run():
            first = []
            async with contextlib.aclosing(engine.generate({"prompt_token_ids": [3, 4]}, long, "leaver")) as gen:
                async for out in gen:
                    first.append(out)
                    break                          # the consumer leaves: the request is aborted
            gen = engine.generate({"prompt_token_ids": [5, 6]}, long, "aborted")
            out = await gen.__anext__()
            engine.abort("aborted")
            await gen.aclose()
            return first, out
        first, out = asyncio.run(run())
        assert not first[0].finished and not out.finished
        st = engine.stats()                        # read between steps: both are gone already
        assert (st["running"], st["waiting"], st["kv_blocks_used"]) == (0, 0, 0)
        p = SamplingParams(temperature=0, max_tokens=4)
        assert asyncio.run(collect(engine, "w7 w8", p, "after"))[1] == alone("w7 w8", p).token_ids
    finally:
        engine.shutdown()


def test_refusals_name_the_problem(llm):
    with pytest.raises(RequestError, match="kv_blocks 1 of 16 tokens hold fewer than max_model_len 32"):
        AsyncLLM(llm, kv_blocks=1)
    engine = AsyncLLM(llm)
    try:
        async def too_long():
            async for _ in engine.generate({"prompt_token_ids": [1] * 32}, None, "x"):
                pass
        with pytest.raises(RequestError, match="has 32 tokens, but max_model_len is 32"):
            asyncio.run(too_long())
        assert isinstance(RequestError("m"), ts.TileSafeError)
    finally:
        engine.shutdown()


def test_shutdown_ends_running_requests_with_abort(llm):
    engine = AsyncLLM(llm)

    async def run():
        outs = []
        async for out in engine.generate("w1 w2", SamplingParams(temperature=0, max_tokens=25, ignore_eos=True), "s"):
            outs.append(out)
            if len(outs) == 1:
                await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)
        return outs
    outs = asyncio.run(run())
    assert outs[-1].finished and outs[-1].finish_reason == "abort" and len(outs) < 25
    assert not engine.thread.alive


def test_a_receiver_whose_event_loop_closed_does_not_stop_the_engine(llm, alone):
    engine = AsyncLLM(llm)
    try:
        async def leave():
            async for _ in engine.generate("w3 w4", SamplingParams(temperature=0, max_tokens=25, ignore_eos=True), "x"):
                break                              # a bare break: the generator outlives this loop
        asyncio.run(leave())
        p = SamplingParams(temperature=0, max_tokens=3)
        assert asyncio.run(collect(engine, "w7 w8", p, "y"))[1] == alone("w7 w8", p).token_ids
        st = engine.stats()
        assert engine.thread.alive and (st["running"], st["kv_blocks_used"]) == (0, 0)
    finally:
        engine.shutdown()


def test_a_decode_batch_is_exactly_the_running_requests(llm, alone, monkeypatch):
    """Short requests in slots 0 and 1 finish; the long one in slot 2 then decodes alone, a
    batch of 1 at its own slot (not rows up to its slot)."""
    batches = []
    run = llm.decode_steps.run

    def record(ids, positions, slots=None):
        batches.append(list(slots))
        return run(ids, positions, slots)
    monkeypatch.setattr(llm.decode_steps, "run", record)
    engine = AsyncLLM(llm)
    try:
        params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (2, 2, 6)]
        prompts = ["w1 w2", "w3", "w4 w5 w6"]

        async def all_():
            return await asyncio.gather(*[collect(engine, p, sp, f"b{i}") for i, (p, sp) in
                                          enumerate(zip(prompts, params))])
        got = asyncio.run(all_())
    finally:
        engine.shutdown()
    assert [g[1] for g in got] == [alone(p, sp).token_ids for p, sp in zip(prompts, params)]
    assert batches[0] == [0, 1, 2] and batches[-1] == [2]


def test_an_engine_thread_that_dies_fails_its_requests_instead_of_hanging(llm, monkeypatch):
    """The H200 run hung here: the thread's start (torch.cuda.set_device("cuda") without an
    index) raised, and every request waited for a loop that was gone."""
    from tilesafe.serve import engine_thread

    def broken(self):
        raise ValueError("no device for this thread")
    monkeypatch.setattr(engine_thread.EngineThread, "_serve", broken)
    engine = AsyncLLM(llm)
    engine.thread._thread.join(5)

    async def run():
        async for _ in engine.generate("w1 w2", SamplingParams(temperature=0, max_tokens=3), "z"):
            pass
    with pytest.raises((ValueError, ts.TileSafeError), match="no device for this thread|shut down"):
        asyncio.run(asyncio.wait_for(run(), 10))
    req = Request("late", None, lambda out: seen.append(out))
    seen: list = []
    engine.thread.add(req)                     # posted after the loop died: answered at once
    assert len(seen) == 1 and isinstance(seen[0], ValueError)
