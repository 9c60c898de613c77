"""benchmarks/serve_load.py's accounting, without a server: a stream chunk that joins several
steps' tokens counts them all (continuous usage), its gap is one chunk gap and its tokens'
inter-token latencies share it; issue 19's targets and the HBM roofline come out of the levels
as defined (old code: one ITL per chunk, no chunk gaps, no targets)."""
import asyncio
import json
from types import SimpleNamespace

import pytest


def sse(chunks) -> bytes:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


def chunk(text, done, prompt=3):
    return {"choices": [{"index": 0, "text": text}], "usage": {"prompt_tokens": prompt, "completion_tokens": done}}


def test_a_chunk_of_several_tokens_counts_them_all(serve_load):
    mod = serve_load
    httpx = mod._httpx()
    body = sse([chunk("a", 1), chunk("bcd", 4), chunk("", 4), chunk("e", 5),
                {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}])
    seen = {}

    def handler(request):
        seen.update(json.loads(request.content))
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    async def run():
        async with httpx.AsyncClient(base_url="http://x", transport=httpx.MockTransport(handler)) as client:
            return await mod._one(client, "m", [1, 2, 3], 5)
    r = asyncio.run(run())
    assert seen["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert (r["tokens"], r["chunks"], len(r["gaps"]), len(r["itl"])) == (5, 3, 2, 4)
    assert r["itl"][0] == r["itl"][1] == r["itl"][2] == pytest.approx(r["gaps"][0] / 3)   # 3 tokens share one gap
    s = mod._summary(1, [r], 1.0)
    assert s["tokens_per_chunk"] == pytest.approx(5 / 3) and s["output_tokens"] == 5


def level(c, tps, offline, gap_p99=None, decode=None):
    lv = {"concurrency": c, "shared_prefix": 0, "output_tokens_per_s": tps, "server_vs_offline": tps / offline,
          "itl_s": {"p99": 0.004}, "chunk_gap_s": {"p99": gap_p99} if gap_p99 else {},
          "step_timing": {"decode": decode} if decode else {}}
    return lv


def test_targets_and_roofline_from_the_levels(serve_load):
    mod = serve_load
    cfg = SimpleNamespace(num_layers=2, num_kv_heads=2, head_dim=4, hidden_size=8, intermediate_size=16,
                          vocab_size=32, tie_word_embeddings=True, num_heads=2)
    llm = SimpleNamespace(config=cfg, dtype=__import__("torch").bfloat16)
    reqs = [([0] * 10, 4)] * 3                                 # context 10 + 4 / 2 = 12 tokens
    lv32 = level(32, 3000.0, 3100.0, gap_p99=0.006, decode=[10, 0.03, 320])
    lv32["hbm_roofline"] = mod._roofline(llm, reqs, 32, lv32)
    from tilesafe.engine.checkpoint import weight_bytes
    kv = 2 * 2 * 2 * 4 * 2 * 12                                # bytes of one sequence's KV at context 12
    ideal = (weight_bytes(cfg, 2) + 32 * kv) / 4.8e12
    assert lv32["hbm_roofline"]["ideal_step_s"] == pytest.approx(ideal)
    assert lv32["hbm_roofline"]["fraction"] == pytest.approx(3000.0 * ideal / 32)
    assert lv32["hbm_roofline"]["decode_step_fraction"] == pytest.approx(ideal / 0.003)   # 32 rows, 3 ms a step
    report = {"levels": [level(1, 300.0, 310.0, decode=[100, 0.25, 100]), lv32,
                         {"concurrency": 128, "shared_prefix": 0, "error": "boom"}]}
    mod._targets(report)
    t = report["targets"]
    assert t["batch1_step_s"] == pytest.approx(0.0025)
    assert t["itl_p99_32_over_2x_batch1_step"] == pytest.approx(0.006 / 0.005)
    assert t["server_vs_offline"] == {1: pytest.approx(300 / 310), 32: pytest.approx(3000 / 3100)}
    assert t["roofline_fraction"] == {32: lv32["hbm_roofline"]["fraction"]}


def test_decode_step_token_values_and_targets_per_value(serve_load):
    """--decode-step-tokens: auto, off (None), batch2x (per decode bucket, within twice its
    step) or N, applied to the engine between levels; the targets are taken per value, the
    batch-1 step from the one 1-client level."""
    mod = serve_load
    assert [mod._step_tokens(x) for x in ("auto", "off", "batch2x", "64")] == ["auto", None, "batch2x", 64]
    set_to = []
    # (8: a row bucket past max_num_seqs that an earlier "auto" level timed; batch2x stays within 4)
    core = SimpleNamespace(decode_step_times={1: 2.0, 2: 2.1, 4: 4.5, 8: 4.0}, llm=SimpleNamespace(max_num_seqs=4),
                           scheduler=SimpleNamespace(row_budget=None), set_decode_step_tokens=set_to.append)
    mod._apply_step_tokens(core, 64)
    mod._apply_step_tokens(core, "batch2x")
    assert set_to == [64, None] and core.scheduler.row_budget == {1: 2, 2: 2, 4: 4}   # 4.5 > 2 x 2.1

    def level(c, value, p99):
        return {"concurrency": c, "shared_prefix": 0, "decode_step_tokens": value, "server_vs_offline": 0.9,
                "itl_s": {"p99": p99}, "chunk_gap_s": {"p99": p99}, "step_timing": {"decode": [10, 0.03, 10]}}
    report = {"levels": [level(1, "off", 0.003), level(32, "off", 0.012), level(32, "64", 0.005)]}
    mod._targets(report)
    by = report["targets_by_decode_step_tokens"]
    assert by["off"]["itl_p99_32_over_2x_batch1_step"] == pytest.approx(2.0)
    assert by["64"]["itl_p99_32_over_2x_batch1_step"] == pytest.approx(5 / 6)
    assert report["targets"] == by["off"]


def test_the_trace_splits_each_tokens_gap_into_its_step_and_the_host_time_before(serve_load):
    """Each decode row of a step waits from the previous step's end to its own end: the step plus
    the host time between; percentiles over tokens, the slowest 1% and the gaps past twice the
    timed batch-1 step by kind of step."""
    trace = [("mixed", 256, 0, 0.000, 0.008),            # (kind, rows, decode rows, start, end) seconds
             ("decode", 2, 2, 0.008, 0.011),            # 2 tokens: 3 ms of step, no host gap
             ("rows", 64, 2, 0.012, 0.017)] + [         # 2 tokens: 5 ms of step + 1 ms before it
                ("decode", 32, 32, 0.017 + 0.003 * i, 0.020 + 0.003 * i) for i in range(100)]   # 3200 x 3 ms
    s = serve_load._trace_summary(trace, {1: 0.002, 32: 0.0025})
    assert s["engine_gap_s"]["p50"] == pytest.approx(0.003) and s["engine_gap_s"]["p99"] == pytest.approx(0.003)
    assert s["over_bound"]["bound_s"] == 0.004 and list(s["over_bound"]) == ["bound_s", "rows"]
    assert s["over_bound"]["rows"] == pytest.approx([2, 6.0, 5.0, 1.0, 64])
    assert len(s["engine_trace"]) == 103 and s["engine_trace"][2] == ["rows", 64, 2, 12.0, 17.0]
    assert serve_load._trace_summary([], {}) == {}


def test_itl_at_a_share_sets_itls_rows_with_that_bound(serve_load):
    from tilesafe.serve.row_policy import ItlRows
    assert serve_load._step_tokens("itl@1.0") == "itl@1.0" and serve_load._step_tokens("itl") == "itl"
    with pytest.raises(ValueError):
        serve_load._step_tokens("itl@x")
    seen = []
    core = SimpleNamespace(decode_step_times={1: 0.002, 64: 0.003, 128: 0.004}, scheduler=SimpleNamespace(),
                           set_decode_step_tokens=seen.append)
    serve_load._apply_step_tokens(core, "itl@1.0")
    assert seen == ["itl"] and core.scheduler.row_budget == core.decode_step_tokens == ItlRows(
        core.decode_step_times, 0.004)
