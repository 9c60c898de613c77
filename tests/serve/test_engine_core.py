"""Continuous batching: the scheduler's admission, preemption and release rules (pure
Python), and AsyncLLM on the tiny model against the offline engine — a deliberately small
KV cache that forces preemption by recomputation, aborts that free capacity at once,
seeded sampling beside other requests, shutdown."""
import asyncio
import contextlib
from types import SimpleNamespace

import pytest

import tilesafe as ts
from tilesafe.engine import RequestError, SamplingParams
from tilesafe.serve import AsyncLLM
from tilesafe.serve.request import Request
from tilesafe.serve.scheduler import Scheduler


def req(rid, n_prompt, order, generated=()):
    seq = SimpleNamespace(prompt_ids=list(range(n_prompt)), tokens=list(generated))
    return Request(rid, seq, sink=lambda out: None, order=order)


def test_scheduler_admits_in_order_and_the_head_is_not_overtaken():
    s = Scheduler(max_num_seqs=4, max_model_len=16, num_blocks=6, block_size=4, prefix_caching=False)
    a, b, c = req("a", 8, 1), req("b", 13, 2), req("c", 2, 3)
    for r in (a, b, c):
        s.add(r)
    plan = s.schedule()
    assert plan.prefill == [(a, 8)] and plan.decode == []   # b needs 4 blocks + 1 headroom for a: 5 > 4 free
    assert list(s.waiting) == [b, c]           # c would fit, but does not pass b
    assert (a.running, s.blocks.stats().used) == (True, 2)
    s.finish(a)
    assert s.schedule().prefill == [(b, 13), (c, 2)] and s.running == [b, c]
    assert s.blocks.stats().used == 5


def test_scheduler_preempts_the_latest_and_requeues_it_first():
    s = Scheduler(max_num_seqs=3, max_model_len=16, num_blocks=4, block_size=4, prefix_caching=False)
    a, b = req("a", 4, 1, generated=[7]), req("b", 3, 2, generated=[7])
    for r in (a, b):
        s.add(r)
    assert s.schedule().prefill == [(a, 5), (b, 4)]     # a: 5 tokens = 2 blocks, b: 4 tokens = 1 block
    s.computed(a, 5), s.computed(b, 4)
    a.seq.tokens.append(8), b.seq.tokens.append(8)   # each sampled a token: b's 5th needs a new block, the last
    plan = s.schedule()
    assert plan.decode == [a, b] and plan.preempted == [] and s.blocks.stats().free == 0
    s.computed(a, 1), s.computed(b, 1)
    a.seq.tokens += [9, 10, 11]                # a now holds 9 tokens: a third block, none free
    plan = s.schedule()
    assert plan.preempted == [b] and plan.prefill == [(a, 3)]   # b (the latest) goes
    assert not b.running and list(s.waiting) == [b] and b.preemptions == 1 and b.computed == 0
    assert s.blocks.num_tokens("a") == 9 and s.blocks.stats().used == 3
    s.finish(a)
    assert s.schedule().prefill == [(b, 5)]
    assert s.blocks.num_tokens("b") == len(b.kv_tokens) == 5     # recomputed: prompt + its generated tokens


def test_finishing_a_request_again_leaves_a_new_request_of_its_id_running():
    s = Scheduler(max_num_seqs=2, max_model_len=16, num_blocks=4, block_size=4)
    old, new = req("x", 3, 1), req("x", 2, 2)
    s.add(old)
    s.schedule()
    s.finish(old)
    s.add(new)
    s.schedule()
    s.finish(old)                      # a late abort of the old one (its receiver found gone)
    assert "x" in s and s.get("x") is new and s.running == [new] and s.blocks.stats().used == 1


def test_scheduler_chunks_long_prompts_within_the_step_budget_beside_decodes():
    s = Scheduler(max_num_seqs=2, max_model_len=32, num_blocks=16, block_size=4, max_num_batched_tokens=4)
    short, long = req("s", 2, 1), req("l", 11, 2)
    for r in (short, long):
        s.add(r)
    plan = s.schedule()
    assert plan.prefill == [(short, 2), (long, 2)]       # the budget's 4 tokens, in arrival order
    s.computed(short, 2), s.computed(long, 2)
    short.seq.tokens.append(5)                           # short's prompt ended: it decodes from now on
    chunks = []
    while long.uncomputed > 1:
        plan = s.schedule()
        assert plan.decode == [short] and plan.num_tokens <= 4
        chunks += [n for _, n in plan.prefill]
        for r, n in plan.prefill:
            s.computed(r, n)
        s.computed(short, 1)
        short.seq.tokens.append(5)
    assert chunks == [3, 3, 3] and long.computed == 11


def test_scheduler_admits_on_prefix_hits_and_skips_their_tokens():
    s = Scheduler(max_num_seqs=2, max_model_len=32, num_blocks=6, block_size=4)
    a = req("a", 13, 1)                        # 4 blocks
    s.add(a)
    s.schedule()
    s.computed(a, 13)
    b = req("b", 13, 2)                        # the same prompt: 4 blocks, but 3 are a's (shared)
    s.add(b)
    plan = s.schedule()
    assert plan.decode == [b] and plan.prefill == []     # one token left to compute: the decode step does it
    assert (b.cached, b.computed) == (12, 12) and s.blocks.stats().used == 5
    assert s.blocks.block_table("a")[:3] == s.blocks.block_table("b")[:3]


@pytest.fixture(scope="module")
def alone(llm_one_seq):
    return lambda prompt, params: llm_one_seq.generate(prompt, params)[0].outputs[0]


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
    """Three requests decode together (a bucket of 4: one padding row); the two short ones
    finish and the long one then decodes alone, in the bucket of 1."""
    from tilesafe.engine.decode_step import DecodeSteps
    batches = []
    start = DecodeSteps.start_paged

    def record(self, ids, positions, rows, tables):
        batches.append((len(ids), self.bucket(len(ids))))
        return start(self, ids, positions, rows, tables)
    monkeypatch.setattr(DecodeSteps, "start_paged", record)
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
    assert (3, 4) in batches and batches[-1] == (1, 1)


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


def test_text_is_made_on_the_event_loop_unless_a_stop_string_needs_it(llm, alone, monkeypatch):
    """Old code: every request was detokenized on the engine thread."""
    from tilesafe.engine.detokenize import IncrementalDetokenizer
    from tilesafe.serve.engine_core import EngineCore
    threads = []
    real = IncrementalDetokenizer.add

    def add(self, token_id):
        import threading
        threads.append(threading.current_thread().name)
        return real(self, token_id)
    monkeypatch.setattr(IncrementalDetokenizer, "add", add)
    seen = []
    real_add = EngineCore.add

    def core_add(self, req):
        seen.append(req.seq.detokenizer is None)
        return real_add(self, req)
    monkeypatch.setattr(EngineCore, "add", core_add)
    engine = AsyncLLM(llm)
    try:
        plain = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
        stopped = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, stop=["w3"])
        text, tokens, last = asyncio.run(collect(engine, "w5 w6", plain, "p"))
        on_engine = [t for t in threads if t == "tilesafe-engine"]
        threads.clear()
        stop_text, _, stop_last = asyncio.run(collect(engine, "w5 w6", stopped, "s"))
    finally:
        engine.shutdown()
    want, want_stop = alone("w5 w6", plain), alone("w5 w6", stopped)
    assert (text, tokens, last.finish_reason) == (want.text, want.token_ids, want.finish_reason)
    assert (stop_text, stop_last.finish_reason, stop_last.stop_reason) == \
        (want_stop.text, want_stop.finish_reason, want_stop.stop_reason)
    assert seen == [True, False] and on_engine == []            # plain: on the loop; a stop string: on the engine
    assert "tilesafe-engine" in threads


def test_a_steps_outputs_go_out_while_the_next_decode_step_runs(llm, alone, monkeypatch):
    """The engine thread sends step N's outputs after launching step N + 1 (overlapping the
    GPU), in order, and the last ones when no work is left; a receiver that is gone then
    aborts its request after the step, which frees its blocks. (Steps launched ahead:
    test_launch_ahead.py.)"""
    from tilesafe.serve.engine_core import EngineCore
    events = []
    core = EngineCore(llm, kv_blocks=32, block_size=4, launch_ahead=False)
    start, finish = core.runner.start_decode, core.runner.finish_decode
    monkeypatch.setattr(core.runner, "start_decode",
                        lambda reqs, prefill=(): events.append("launch") or start(reqs, prefill))
    monkeypatch.setattr(core.runner, "finish_decode", lambda t: events.append("wait") or finish(t))
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    got, gone = [], []
    core.add(Request("o", llm._sequences({"prompt_token_ids": [4, 8, 15]}, params)[0],
                     sink=lambda out: events.append("send") or got.extend(out.token_ids)))

    def vanished(out):
        gone.append(out)
        raise RuntimeError("Event loop is closed")
    core.add(Request("v", llm._sequences({"prompt_token_ids": [16, 23]}, SamplingParams(
        temperature=0, max_tokens=8, ignore_eos=True))[0], sink=vanished))
    while core.has_work():
        core.step()
    assert events == ["launch", "send", "wait", "launch", "send", "wait", "send"]
    assert got == alone({"prompt_token_ids": [4, 8, 15]}, params).token_ids
    assert len(gone) == 1 and core.scheduler.blocks.stats().used == 0      # v aborted after its first output


def test_a_failed_step_leaves_no_stale_abort_for_a_later_request_of_the_same_id(llm, alone, monkeypatch):
    """A receiver found gone inside a step that then fails: fail_all ends every request.
    Old code kept the gone request for the next step's aborts, which dropped a new request
    of the same id from the scheduler: its outputs were never sent."""
    from tilesafe.serve.engine_core import EngineCore
    core = EngineCore(llm, kv_blocks=32, block_size=4)
    finish = core.runner.finish_decode

    def vanished(out):
        raise RuntimeError("Event loop is closed")

    def device_lost(ticket):
        raise ValueError("device lost")
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    core.add(Request("v", llm._sequences({"prompt_token_ids": [16, 23]}, params)[0], sink=vanished))
    core.step()                                # prefill: v's first token is held
    monkeypatch.setattr(core.runner, "finish_decode", device_lost)
    with pytest.raises(ValueError):
        core.step()                            # v's send fails inside this step, then the step fails
    core.fail_all(ValueError("device lost"))   # what EngineThread does
    monkeypatch.setattr(core.runner, "finish_decode", finish)
    got = []
    core.add(Request("v", llm._sequences({"prompt_token_ids": [4, 8, 15]}, params)[0],
                     sink=lambda out: got.append(out)))
    for _ in range(20):
        if not core.has_work():
            break
        core.step()
    assert [t for o in got for t in o.token_ids] == alone({"prompt_token_ids": [4, 8, 15]}, params).token_ids
    assert got[-1].finished and not core.has_work() and core.scheduler.blocks.stats().used == 0
