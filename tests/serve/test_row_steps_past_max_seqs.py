"""Row steps past max_num_seqs: a step of decode-step rows may hold up to ROW_STEP_SEQS x
max_num_seqs rows (its decodes plus prompt rows, in the decode step's buckets past
max_num_seqs), and "auto" gives each decode bucket the largest row bucket whose timed step is
within twice its own — so many waiting prompts are admitted several a step, and every prompt
still gets exactly the tokens it gets alone."""

from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request
from tilesafe.serve.row_policy import ItlRows

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
SEEDED = SamplingParams(temperature=0.9, top_k=12, seed=7, max_tokens=4, ignore_eos=True)
PROMPTS = [[2, 4, 6], [8, 10, 12, 14, 16, 18, 20], [3, 5, 7, 9, 11], [13, 15, 17, 19, 21, 23, 25, 27, 29],
           [31, 33], [35, 37, 39, 41, 43, 45]]


def _serve(core, llm):
    """PROMPTS[0] alone first (its decode rows then carry the rest), the others at once;
    each request's tokens and every step's plan."""
    plans, schedule = [], core.scheduler.schedule
    core.scheduler.schedule = lambda **kw: plans.append(schedule(**kw)) or plans[-1]
    outs = [[] for _ in PROMPTS]

    def add(i):
        seq = llm._sequences({"prompt_token_ids": PROMPTS[i]}, GREEDY if i % 2 == 0 else SEEDED)[0]
        core.add(Request(f"r{i}", seq, sink=lambda out, got=outs[i]: got.extend(out.token_ids)))
    add(0)
    core.step()
    for i in range(1, len(PROMPTS)):
        add(i)
    while core.has_work():
        core.step()
    return outs, plans


def _alone(llm_one_seq):
    return [llm_one_seq.generate({"prompt_token_ids": p}, GREEDY if i % 2 == 0 else SEEDED)[0].outputs[0].token_ids
            for i, p in enumerate(PROMPTS)]


def test_row_steps_past_max_num_seqs_give_each_prompt_its_tokens(llm, llm_one_seq):
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, decode_step_tokens=12)
    assert core.runner.decoder.sizes == [1, 2, 4, 8, 12] == core.scheduler.row_buckets
    outs, plans = _serve(core, llm)
    assert outs == _alone(llm_one_seq)
    rows = [p.num_tokens for p in plans if p.rows]
    assert max(rows) > 4 and all(n <= 12 for n in rows)      # past max_num_seqs (4), within 3 x
    assert core.runner.decoder.steps.keys() >= {8}           # a step ran in a row bucket


def test_auto_gives_each_decode_bucket_the_rows_within_twice_its_step(llm, llm_one_seq):
    """"auto" from the buckets' timed steps (faked here: the CPU captures none): the decode rows'
    bucket b may grow to the largest row bucket whose step takes <= 2 x b's."""
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16)
    core._warmed = True                                       # as after a GPU warm-up: the buckets can be timed
    core.runner.time_decode_buckets = lambda: {1: 1.0, 2: 1.1, 4: 1.3, 8: 2.0, 12: 2.7}
    core.set_decode_step_tokens("auto")
    assert core.scheduler.row_budget == core.decode_step_tokens == {1: 8, 2: 8, 4: 8, 8: 12, 12: 12}
    outs, plans = _serve(core, llm)
    assert outs == _alone(llm_one_seq)
    assert [p.num_tokens for p in plans if p.rows][0] == 8    # one decode row (bucket 1): 8 rows, not 4


def test_itl_keeps_to_the_decode_buckets_and_takes_whole_prompts_past_keeping_up(llm, llm_one_seq):
    """"itl" from faked timings of the decode buckets (bound 2 x 1.0: all of them) adds no row
    bucket past max_num_seqs; five prompts queued beside one decode row that lives 4 tokens
    would take 10 steps at 4 rows, so they go as without rows (the step's 16 tokens: two whole,
    the third's first 3) and the one under way finishes in rows of at most 4; the trace records
    every step; each prompt gets its tokens."""
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16)
    core._warmed = True
    core.runner.time_decode_buckets = lambda: {1: 1.0, 2: 1.1, 4: 1.3}
    core.set_decode_step_tokens("itl")
    assert core.scheduler.row_budget == core.decode_step_tokens == ItlRows.from_times(core.decode_step_times)
    assert core.runner.decoder.sizes == [1, 2, 4] == core.scheduler.row_buckets
    core.trace = []
    outs, plans = _serve(core, llm)
    assert outs == _alone(llm_one_seq)
    fallback = [p for p in plans if p.prefill and p.decode and not p.rows]
    assert fallback and [n for _, n in fallback[0].prefill] == [7, 5, 3]      # the step's 16 tokens, whole prompts
    assert any(p.rows and p.prefill for p in plans) and all(p.num_tokens <= 4 for p in plans if p.rows)
    assert [(k, rows, d) for k, rows, d, _, _ in core.trace] == [
        (("rows" if p.rows else "packed") if p.prefill else "decode", p.num_tokens, len(p.decode)) for p in plans]
    assert all(began < end for _, _, _, began, end in core.trace)


def test_a_greedy_batch_whose_requests_change_uploads_no_sampler_rows(llm, llm_one_seq):
    """A greedy request's sampler row is an idle row, so row steps — whose rows move every step
    as prompt rows come and go — write the sampler's rows only when their count changes (the
    old runner rewrote every row, with the requests' own parameters, nearly every step)."""
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, decode_step_tokens=12)
    sampler, writes = core.runner.sampler, []
    set_rows = sampler.set_rows
    sampler.set_rows = lambda params, seeds: writes.append((list(params), list(seeds))) or set_rows(params, seeds)
    outs = [[] for _ in PROMPTS]
    for i, p in enumerate(PROMPTS):
        seq = llm._sequences({"prompt_token_ids": p}, GREEDY)[0]
        core.add(Request(f"g{i}", seq, sink=lambda out, got=outs[i]: got.extend(out.token_ids)))
        core.step()                                           # one arrival a step: the rows change every step
    while core.has_work():
        core.step()
    assert outs == [llm_one_seq.generate({"prompt_token_ids": p}, GREEDY)[0].outputs[0].token_ids for p in PROMPTS]
    assert core.steps > len(writes) and all(seeds == [0] * len(seeds) for _, seeds in writes)
    assert all(a is b for params, _ in writes for a, b in zip(params, params[1:]))   # idle rows, all alike
    assert all(len(a[0]) != len(b[0]) for a, b in zip(writes, writes[1:]))          # rewritten only to resize


def test_a_row_count_adds_only_the_row_buckets_it_can_reach(llm):
    """A fixed decode_step_tokens makes (memory-checks, warms) only the buckets past
    max_num_seqs a step of that many rows can take; "auto" may reach them all. (The old runner
    added 8 and 12 for any value: memory and compiles for steps a row count of 4 never runs.)"""
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, decode_step_tokens=4)
    assert core.runner.decoder.sizes == [1, 2, 4] == core.scheduler.row_buckets
    core.set_decode_step_tokens(6)                            # past max_num_seqs (4): the 2x bucket holds it
    assert core.runner.decoder.sizes == [1, 2, 4, 8] == core.scheduler.row_buckets
    core.set_decode_step_tokens(9)
    assert core.runner.decoder.sizes == [1, 2, 4, 8, 12] == core.scheduler.row_buckets
    core.set_decode_step_tokens(2)                            # fewer rows again: the buckets made stay
    assert core.runner.decoder.sizes == [1, 2, 4, 8, 12] == core.scheduler.row_buckets
    assert core.runner.row_buckets() == [1, 2, 4, 8, 12]


def test_row_buckets_that_do_not_fit_are_refused_and_leave_the_engine_as_it_was(llm, monkeypatch):
    """The row buckets' memory is checked before they are made: refused naming them, with a help
    line about decode_step_tokens (not the KV pool's advice), and the engine keeps its setting."""
    import pytest
    import torch

    from tilesafe.engine import RequestError
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, decode_step_tokens=3)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 2000))
    monkeypatch.setattr(llm, "device", "cuda")                 # the check runs on a GPU only
    with pytest.raises(RequestError) as e:
        core.set_decode_step_tokens(9)
    assert "serve: decode-step row buckets (" in e.value.message and "but cuda has 0.00 GiB free" in e.value.message
    assert "decode_step_tokens" in e.value.help
    assert core.runner.decoder.sizes == [1, 2, 4] == core.scheduler.row_buckets
    assert core.decode_step_tokens == 3 == core.scheduler.row_budget
