"""The OpenAI-compatible server on loopback, driven by the real `openai` client, against the
offline engine (`LLM.generate` of each prompt alone) as the oracle: completions, chat,
streaming, stops, seeds, logprobs, concurrent clients, a disconnect, and a bad-request fuzz."""
import asyncio
import json
import re
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from tilesafe.engine import LLM, SamplingParams  # noqa: E402
from tilesafe.serve import AsyncLLM, BackgroundServer, ServerMetrics, build_app  # noqa: E402

NAME = "tiny-words"


@pytest.fixture(scope="module")
def offline(word_model):
    """The oracle: the offline engine, one prompt at a time."""
    llm = LLM(str(word_model), device="cpu", max_model_len=32, max_num_seqs=1, progress=False)

    def run(prompt, **params):
        return llm.generate(prompt, SamplingParams(**params))[0]
    run.llm = llm
    return run


@pytest.fixture(scope="module")
def server(word_model):
    llm = LLM(str(word_model), device="cpu", max_model_len=32, max_num_seqs=8, progress=False)
    metrics = ServerMetrics(NAME)
    engine = AsyncLLM(llm, metrics=metrics)
    srv = BackgroundServer(build_app(engine, NAME, metrics))
    srv.engine = engine
    yield srv
    srv.stop()
    assert not engine.thread.alive           # the lifespan shut the engine down


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def metric(server, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    m = re.search(rf"^{name}{{[^}}]*}} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def wait_idle(server, timeout=20.0):
    """Until no request runs or waits and no KV block is held."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if metric(server, "tilesafe_kv_blocks_in_use") == 0 and metric(server, "tilesafe_num_requests_running") == 0:
            return
        time.sleep(0.05)
    raise AssertionError("the server kept KV blocks or running requests")


def test_models_health_and_metrics(server, client):
    assert [m.id for m in client.models.list().data] == [NAME]
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert metric(server, "tilesafe_kv_blocks_total") == 8 * 2      # 8 sequences of 32 tokens, 16-token blocks


def test_completion_equals_offline(server, client, offline):
    want = offline("w3 w17 w5", temperature=0, max_tokens=6, logprobs=1).outputs[0]
    prompt_before = metric(server, "tilesafe_prompt_tokens_total")
    generated_before = metric(server, "tilesafe_generation_tokens_total")
    ttft_before = metric(server, "tilesafe_time_to_first_token_seconds_count")
    itl_before = metric(server, "tilesafe_inter_token_latency_seconds_count")
    got = client.completions.create(model=NAME, prompt="w3 w17 w5", max_tokens=6, temperature=0, logprobs=1)
    assert metric(server, "tilesafe_prompt_tokens_total") - prompt_before == 3
    assert metric(server, "tilesafe_generation_tokens_total") - generated_before == 6
    assert metric(server, "tilesafe_time_to_first_token_seconds_count") - ttft_before == 1
    assert metric(server, "tilesafe_inter_token_latency_seconds_count") - itl_before == 5
    c = got.choices[0]
    assert c.text == want.text and c.finish_reason == "length"
    assert c.logprobs.token_logprobs == pytest.approx([d[t].logprob for d, t in zip(want.logprobs, want.token_ids)])
    assert c.logprobs.tokens == [f"w{t}" for t in want.token_ids]          # each token's own text
    assert (got.usage.prompt_tokens, got.usage.completion_tokens, got.usage.total_tokens) == (3, 6, 9)
    by_ids = client.completions.create(model=NAME, prompt=[3, 17, 5], max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == want.text


def test_chat_and_streaming_equal_offline(server, client, offline):
    msgs = [{"role": "user", "content": "w4 w8 w15"}]
    ids = offline.llm.tokenizer.apply_chat_template(msgs)
    want = offline({"prompt_token_ids": ids}, temperature=0, max_tokens=5).outputs[0]
    got = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=5, temperature=0)
    assert got.choices[0].message.content == want.text and got.choices[0].message.role == "assistant"
    assert got.usage.prompt_tokens == len(ids)
    chunks = list(client.chat.completions.create(model=NAME, messages=msgs, max_tokens=5, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content for c in chunks if c.choices) == want.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 5
    text = "".join(c.choices[0].text for c in client.completions.create(model=NAME, prompt="w3 w17 w5", max_tokens=4,
                                                                          temperature=0, stream=True))
    assert text == offline("w3 w17 w5", temperature=0, max_tokens=4).outputs[0].text


def test_continuous_usage_stats_put_the_tokens_so_far_in_every_chunk(server, offline):
    want = offline({"prompt_token_ids": [3, 17, 5]}, temperature=0, max_tokens=5).outputs[0]
    body = {"model": NAME, "prompt": [3, 17, 5], "max_tokens": 5, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.stream("POST", server.url + "/v1/completions", json=body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    counts = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    assert counts == sorted(counts) and counts[-1] == 5 and counts[0] >= 1     # non-decreasing, ends at the total
    assert all(c["usage"]["prompt_tokens"] == 3 for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == want.text
    plain = {**body, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.url + "/v1/completions", json=plain) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert [("usage" in c) for c in chunks] == [False] * (len(chunks) - 1) + [True]   # only the last, as OpenAI's
    bad = httpx.post(server.url + "/v1/completions",
                     json={**body, "stream_options": {"include_usage": True, "continuous_usage_stats": "yes"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream_options"


def test_stop_strings_and_seeds(server, client, offline):
    full = offline("w3 w17 w5", temperature=0, max_tokens=6).outputs[0]
    stop = f"w{full.token_ids[2]}"
    got = client.completions.create(model=NAME, prompt="w3 w17 w5", max_tokens=6, temperature=0, stop=stop)
    assert got.choices[0].finish_reason == "stop" and got.choices[0].text == full.text[:full.text.find(stop)]
    streamed = client.completions.create(model=NAME, prompt="w3 w17 w5", max_tokens=6, temperature=0, stop=[stop],
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed) == got.choices[0].text
    want = offline("w1 w2", temperature=1.0, top_k=20, max_tokens=5, seed=1234).outputs[0].text
    for _ in range(2):
        got = client.completions.create(model=NAME, prompt="w1 w2", max_tokens=5, temperature=1.0, seed=1234,
                                        extra_body={"top_k": 20})
        assert got.choices[0].text == want


def test_concurrent_greedy_clients_each_get_their_offline_tokens(server, offline):
    prompts = [" ".join(f"w{(7 * i + j) % 90}" for j in range(1 + i % 5)) for i in range(10)]
    want = [offline(p, temperature=0, max_tokens=4).outputs[0].text for p in prompts]
    aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)

    async def one(p, stream):
        if stream:
            chunks = await aclient.completions.create(model=NAME, prompt=p, max_tokens=4, temperature=0, stream=True)
            return "".join([c.choices[0].text async for c in chunks])
        return (await aclient.completions.create(model=NAME, prompt=p, max_tokens=4, temperature=0)).choices[0].text

    async def all_():
        return await asyncio.gather(*[one(p, i % 2 == 0) for i, p in enumerate(prompts)])
    assert asyncio.run(all_()) == want            # 10 clients over 8 slots: some wait, all match
    wait_idle(server)


def test_a_repeated_prompt_hits_the_prefix_cache_and_answers_the_same(server, client, offline):
    prompt = " ".join(f"w{(7 * i) % 80 + 1}" for i in range(20))   # 20 tokens: one full block of 16 to share
    want = offline(prompt, temperature=0, max_tokens=5).outputs[0].text
    hits = metric(server, "tilesafe_prefix_cache_hits_total")
    first = client.completions.create(model=NAME, prompt=prompt, max_tokens=5, temperature=0)
    again = client.completions.create(model=NAME, prompt=prompt, max_tokens=5, temperature=0)
    assert first.choices[0].text == again.choices[0].text == want
    assert metric(server, "tilesafe_prefix_cache_hits_total") - hits >= 1
    assert metric(server, "tilesafe_prefix_cache_queries_total") >= metric(server, "tilesafe_prefix_cache_hits_total")


def test_disconnect_mid_stream_frees_capacity(server):
    body = {"model": NAME, "prompt": "w5 w6", "max_tokens": 28, "temperature": 0, "stream": True, "ignore_eos": True}
    before = metric(server, "tilesafe_generation_tokens_total")
    with httpx.Client(timeout=30) as h:
        with h.stream("POST", server.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            assert json.loads(first[5:])["choices"][0]["finish_reason"] is None
            assert metric(server, "tilesafe_kv_blocks_in_use") > 0      # it holds blocks while it runs
    wait_idle(server)
    assert metric(server, "tilesafe_generation_tokens_total") - before < 28      # it did not run to the end


BAD = [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"prompt": "w1"}, 400, "model"),
    ({"model": "other", "prompt": "w1"}, 404, "model"),
    ({"model": NAME}, 400, "prompt"),
    ({"model": NAME, "prompt": 5}, 400, "prompt"),
    ({"model": NAME, "prompt": []}, 400, "prompt"),
    ({"model": NAME, "prompt": ["w1", "w2"]}, 400, "prompt"),
    ({"model": NAME, "prompt": [1, 500]}, 400, "prompt"),                  # a token outside the vocabulary
    ({"model": NAME, "prompt": " ".join(["w1"] * 40)}, 400, "prompt"),    # longer than max_model_len
    ({"model": NAME, "prompt": "w1", "max_tokens": 0}, 400, "max_tokens"),
    ({"model": NAME, "prompt": "w1", "max_tokens": -3}, 400, "max_tokens"),
    ({"model": NAME, "prompt": "w1", "max_tokens": "5"}, 400, "max_tokens"),
    ({"model": NAME, "prompt": "w1", "max_tokens": 2.5}, 400, "max_tokens"),
    ({"model": NAME, "prompt": "w1", "temperature": "hot"}, 400, "temperature"),
    ({"model": NAME, "prompt": "w1", "temperature": -1}, 400, "temperature"),
    ({"model": NAME, "prompt": "w1", "top_p": 0}, 400, "top_p"),
    ({"model": NAME, "prompt": "w1", "top_p": 1.5}, 400, "top_p"),
    ({"model": NAME, "prompt": "w1", "top_k": -2}, 400, "top_k"),
    ({"model": NAME, "prompt": "w1", "seed": "x"}, 400, "seed"),
    ({"model": NAME, "prompt": "w1", "stop": 3}, 400, "stop"),
    ({"model": NAME, "prompt": "w1", "stop": [""]}, 400, "stop"),
    ({"model": NAME, "prompt": "w1", "n": 2}, 400, "n"),
    ({"model": NAME, "prompt": "w1", "logprobs": 5}, 400, "logprobs"),
    ({"model": NAME, "prompt": "w1", "stream": "yes"}, 400, "stream"),
    ({"model": NAME, "prompt": "w1", "echo": True}, 400, "echo"),
    ({"model": NAME, "prompt": "w1", "ignore_eos": "yes"}, 400, "ignore_eos"),
    ({"model": NAME, "prompt": "w1", "presence_penalty": 0.5}, 400, "presence_penalty"),   # not implemented
    ({"model": NAME, "prompt": "w1", "min_p": 0.1}, 400, "min_p"),                         # (was dropped)
]
BAD_CHAT = [
    ({"model": NAME}, 400, "messages"),
    ({"model": NAME, "messages": []}, 400, "messages"),
    ({"model": NAME, "messages": [{"role": "user"}]}, 400, "messages"),
    ({"model": NAME, "messages": "hi"}, 400, "messages"),
    ({"model": NAME, "messages": [{"role": "user", "content": "w1"}], "logprobs": 1}, 400, "logprobs"),
    ({"model": NAME, "messages": [{"role": "user", "content": "w1"}], "max_completion_tokens": 0}, 400,
     "max_completion_tokens"),
    ({"model": "x", "messages": [{"role": "user", "content": "w1"}]}, 404, "model"),
    ({"model": NAME, "messages": [{"role": "user", "content": "w1"}], "logit_bias": {"3": 5}}, 400, "logit_bias"),
]


def test_bad_request_fuzz_leaves_the_server_serving(server, client, offline):
    want = offline("w9 w10", temperature=0, max_tokens=3).outputs[0].text
    cases = [("/v1/completions", *b) for b in BAD] + [("/v1/chat/completions", *b) for b in BAD_CHAT]
    with httpx.Client(base_url=server.url, timeout=30) as h:
        for round_ in range(8):                    # 8 x 37 bad requests, a good one after each round
            for path, body, status, param in cases:
                kw = {"content": body} if isinstance(body, bytes) else {"json": body}
                r = h.post(path, **kw)
                assert r.status_code == status, (path, body, r.text)
                err = r.json()["error"]
                assert err["param"] == param and err["message"] and err["type"]
            got = client.completions.create(model=NAME, prompt="w9 w10", max_tokens=3, temperature=0)
            assert got.choices[0].text == want
    assert httpx.get(server.url + "/health").status_code == 200
    wait_idle(server)
    assert metric(server, "tilesafe_num_requests_waiting") == 0


def test_an_engine_refusal_keeps_its_help_line(server, offline):
    """A prompt the engine refuses is an HTTP 400 whose message is the engine's, with its help
    line (what to do instead): it was the message alone."""
    from tilesafe.engine import RequestError
    prompt = " ".join(["w1"] * 40)
    with pytest.raises(RequestError) as want:
        offline(prompt, max_tokens=2)
    r = httpx.post(server.url + "/v1/completions", json={"model": NAME, "prompt": prompt, "max_tokens": 2}, timeout=30)
    assert r.status_code == 400 and want.value.help
    assert r.json()["error"]["message"] == f"{want.value.message} ({want.value.help})"
