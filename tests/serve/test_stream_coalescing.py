"""A stream consumer that falls behind the engine gets the outputs queued for it joined into
one (AsyncLLM's merge_queued): fewer, larger outputs whose tokens and text are still exactly
the offline engine's (old code: one output per step, however far behind)."""
import asyncio
import time

import pytest

from tilesafe.engine import RequestError, SamplingParams
from tilesafe.serve import AsyncLLM
from tilesafe.serve.async_llm import merge_queued
from tilesafe.serve.outputs import StreamOutput


def out(text, ids, n, finished=False, logprobs=None):
    return StreamOutput("r", text, list(ids), logprobs, [1, 2], n, finished, "length" if finished else None)


def test_merge_joins_what_is_queued_and_keeps_an_exception_for_later():
    async def run():
        q = asyncio.Queue()
        for o in (out("b", [6], 2, logprobs=[-0.5]), out("c", [7], 3, logprobs=[-0.25])):
            q.put_nowait(o)
        error = RequestError("boom")
        q.put_nowait(error)
        q.put_nowait(out("d", [8], 4, finished=True))
        first = out("a", [5], 1, logprobs=[-1.0])
        held = merge_queued(first, q)
        assert (first.text, first.token_ids, first.logprobs, first.num_generated, first.finished) == \
            ("abc", [5, 6, 7], [-1.0, -0.5, -0.25], 3, False)
        assert held is error and q.qsize() == 1            # what came after the exception stays queued
        last = out("x", [9], 1, finished=True)
        q2 = asyncio.Queue()
        q2.put_nowait(out("y", [10], 2))
        assert merge_queued(last, q2) is None and last.token_ids == [9] and q2.qsize() == 1   # finished: nothing joins
    asyncio.run(run())


@pytest.mark.parametrize("stop", [(), ["w99"]])     # detokenized on the event loop / on the engine thread
def test_a_consumer_that_falls_behind_gets_the_rest_in_one_output(llm, llm_one_seq, stop):
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, **({"stop": stop} if stop else {}))
    prompt = {"prompt_token_ids": [3, 9, 4]}
    want = llm_one_seq.generate(prompt, params)[0].outputs[0]
    engine = AsyncLLM(llm)
    try:
        async def run():
            outs = []
            async for o in engine.generate(prompt, params, "slow"):
                outs.append(o)
                if len(outs) == 1:          # block the loop until the engine has finished the request
                    end = time.monotonic() + 20
                    while engine.stats()["running"] and time.monotonic() < end:
                        time.sleep(0.01)
            return outs
        outs = asyncio.run(run())
    finally:
        engine.shutdown()
    assert len(outs) == 2 and outs[-1].finished and outs[-1].finish_reason == "length"
    assert [t for o in outs for t in o.token_ids] == want.token_ids
    assert "".join(o.text for o in outs) == want.text
    assert outs[-1].num_generated == 10


def test_a_stream_interval_sends_each_requests_tokens_every_other_step(llm, llm_one_seq):
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    params = SamplingParams(temperature=0, max_tokens=9, ignore_eos=True)
    prompts = [[3, 9, 4], [5, 6], [7, 8, 10, 11]]
    core = EngineCore(llm, stream_interval=2, stream_interval_from=2)
    outs = [[] for _ in prompts]
    for i, p in enumerate(prompts):
        core.add(Request(f"r{i}", llm._sequences({"prompt_token_ids": p}, params)[0], sink=outs[i].append))
    while core.has_work():
        core.step()
    for p, got in zip(prompts, outs):
        want = llm_one_seq.generate({"prompt_token_ids": p}, params)[0].outputs[0]
        assert [t for o in got for t in o.token_ids] == want.token_ids
        assert len(got[0].token_ids) == 1 and got[-1].finished          # the first token and the last at once
        assert len(got) <= 6 and max(len(o.token_ids) for o in got) == 2    # 9 tokens in 5-6 outputs, not 9
    with pytest.raises(RequestError, match="stream_interval must be a positive int, got 0") as e:
        EngineCore(llm, stream_interval=0)  # bad-interval
    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# bad-interval"))
    assert e.value.loc.line == line and "every N steps" in e.value.help


def test_an_abort_at_shutdown_sends_the_tokens_a_stream_interval_held(llm):
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    core = EngineCore(llm, stream_interval=3, stream_interval_from=1)
    got = []
    req = Request("r", llm._sequences({"prompt_token_ids": [3, 9, 4]}, params)[0], sink=got.append)
    core.add(req)
    for _ in range(5):
        core.step()
    core.abort_all()                   # shutdown: what was generated goes out, then the abort
    assert [t for o in got for t in o.token_ids] == req.seq.tokens and len(req.seq.tokens) == 5
    assert got[-1].finished and got[-1].finish_reason == "abort"


def test_tokens_a_stream_interval_held_each_count_in_the_inter_token_histogram(llm):
    # Old code observed one gap an output: 4 of the 6 inter-token latencies, most two steps long.
    pytest.importorskip("prometheus_client")
    import re

    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.metrics import ServerMetrics
    from tilesafe.serve.request import Request
    metrics = ServerMetrics("m")
    core = EngineCore(llm, metrics=metrics, stream_interval=2, stream_interval_from=1)
    got = []
    req = Request("r", llm._sequences({"prompt_token_ids": [3, 9, 4]},
                                      SamplingParams(temperature=0, max_tokens=7, ignore_eos=True))[0],
                  sink=got.append)
    core.add(req)
    while core.has_work():
        core.step()
    assert sum(len(o.token_ids) for o in got) == 7 and max(len(o.token_ids) for o in got) == 2
    text = metrics.render().decode()

    def read(name):
        return float(re.search(rf"^{name}{{[^}}]*}} ([0-9.e+-]+)$", text, re.M).group(1))
    assert read("tilesafe_inter_token_latency_seconds_count") == 6
    assert read("tilesafe_inter_token_latency_seconds_sum") == pytest.approx(req.last_token_at - req.first_token_at)
