"""Decode-step rows (EngineCore's decode_step_tokens, Scheduler.row_budget): a step that carries
decode rows runs as one decode step whose extra rows are prompt tokens, at most the budget's
rows in all (or the decode rows' bucket), so a prompt arriving beside running requests is
prefilled over several bounded steps — each prompt still gets exactly the tokens it gets
alone (greedy and seeded), fresh, chunked, after a prefix-cache hit."""
from types import SimpleNamespace

import pytest

from tilesafe.engine import RequestError, SamplingParams
from tilesafe.serve.engine_core import EngineCore, rows_within_each
from tilesafe.serve.request import Request
from tilesafe.serve.scheduler import Scheduler

PARAMS = [SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
          SamplingParams(temperature=0.8, top_k=20, seed=4, max_tokens=5, ignore_eos=True)]


def _request(llm, i, prompt, outs):
    return Request(f"r{i}", llm._sequences({"prompt_token_ids": prompt}, PARAMS[i % 2])[0],
                   sink=lambda out: outs[i].extend(out.token_ids))


def _alone(llm_one_seq, prompts):
    return [llm_one_seq.generate({"prompt_token_ids": p}, PARAMS[i % 2])[0].outputs[0].token_ids
            for i, p in enumerate(prompts)]


def test_prompts_beside_decodes_go_as_bounded_decode_rows_with_their_tokens(llm, llm_one_seq):
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=16, decode_step_tokens=4)
    plans = []
    schedule = core.scheduler.schedule
    core.scheduler.schedule = lambda **kw: plans.append(schedule(**kw)) or plans[-1]
    prompts = [[2, 4, 6], [8, 10, 12, 14, 16, 18, 20], [3, 5], [7, 9, 11, 13, 15]]
    outs = [[] for _ in prompts]
    core.add(_request(llm, 0, prompts[0], outs))
    core.step()                                         # nothing decodes yet: the whole prompt
    for i in (1, 2, 3):
        core.add(_request(llm, i, prompts[i], outs))
    while core.has_work():
        core.step()
    assert outs == _alone(llm_one_seq, prompts)
    assert not plans[0].rows and plans[1].rows
    assert all(p.num_tokens <= 4 for p in plans[1:])    # every later step: at most the budget's rows
    assert [n for _, n in plans[1].prefill] == [3]       # r1's 7 tokens: 3 rows beside r0's decode row ...
    assert [n for _, n in plans[2].prefill] == [3]       # ... then 3 more, then its last with r2's start
    assert core.timing["rows"][0] >= 4 and core.timing["packed"][0] == 1     # the packed step: r0 alone


def test_a_prefix_hit_keeps_its_cached_blocks_as_rows(llm, llm_one_seq):
    """Row steps admit a prefix-cache hit without recomputing its cached positions (old
    scheduling with max_fresh: recomputed from position 0), and it gets its tokens."""
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=16, decode_step_tokens=4)
    shared = [2, 4, 6, 8, 10, 12, 14, 16]
    prompts = [shared + [1], shared + [3, 5]]
    outs = [[] for _ in prompts]
    core.add(_request(llm, 0, prompts[0], outs))
    core.step()
    core.add(_request(llm, 1, prompts[1], outs))
    core.step()                                         # r1 admitted with 8 tokens cached: 2 rows left
    r1 = core.scheduler.get("r1")
    assert r1.cached == 8 and r1.computed == 10
    while core.has_work():
        core.step()
    assert outs == _alone(llm_one_seq, prompts)


def test_the_row_budget_grows_to_the_decode_rows_bucket_and_caps_at_max_num_seqs():
    s = Scheduler(max_num_seqs=8, max_model_len=64, num_blocks=64, block_size=4, row_budget=2,
                  row_buckets=[1, 2, 4, 8])
    decoding, p = three_decoding_and_a_prompt(s)
    plan = s.schedule()                                 # 3 decode rows fill bucket 4: one prompt row
    assert plan.rows and plan.decode == decoding and plan.prefill == [(p, 1)]
    s.computed(p, 1)
    for r in decoding:
        s.computed(r, 1)
        r.seq.tokens.append(7)
    s.row_budget = 8                                    # 3 decode rows + 5 of p's: max_num_seqs rows
    assert s.schedule().prefill == [(p, 5)]


def req(rid, n_prompt, order):
    seq = SimpleNamespace(prompt_ids=list(range(n_prompt)), tokens=[])
    return Request(rid, seq, sink=lambda out: None, order=order)


def three_decoding_and_a_prompt(s):
    """Three 3-token requests prefilled whole (nothing decodes yet: the old way), each with its
    first token, then a 20-token prompt `p` added: ([the three], p)."""
    decoding = [req(f"d{i}", 3, i) for i in range(3)]
    for r in decoding:
        s.add(r)
    for r, n in s.schedule().prefill:
        s.computed(r, n)
        r.seq.tokens.append(7)
    p = req("p", 20, 9)
    s.add(p)
    return decoding, p


def test_rows_within_takes_the_largest_bucket_within_the_factor():
    times = {1: 2.0, 2: 2.1, 4: 2.2, 8: 3.9, 16: 4.1, 32: 5.0}
    assert rows_within_each({}, 2.0) == {}
    assert rows_within_each(times, 2.0) == {1: 8, 2: 16, 4: 16, 8: 32, 16: 32, 32: 32}


def test_a_row_step_passes_max_num_seqs_up_to_the_largest_row_bucket():
    """The old scheduler capped a row step at max_num_seqs rows (here 1 prompt row, not 9)."""
    s = Scheduler(max_num_seqs=4, max_model_len=64, num_blocks=64, block_size=4, row_budget=12,
                  row_buckets=[1, 2, 4, 8, 12])
    decoding, p = three_decoding_and_a_prompt(s)
    plan = s.schedule()
    assert plan.rows and plan.decode == decoding and plan.prefill == [(p, 9)]


def test_a_row_budget_per_decode_bucket():
    s = Scheduler(max_num_seqs=8, max_model_len=64, num_blocks=64, block_size=4, row_budget={1: 2, 2: 2, 4: 8, 8: 8},
                  row_buckets=[1, 2, 4, 8])
    decoding, p = three_decoding_and_a_prompt(s)
    assert s.schedule().prefill == [(p, 5)]              # 3 decode rows: bucket 4's budget, 8 rows


@pytest.mark.parametrize("bad", [0, 13, True, "many"])
def test_decode_step_tokens_is_checked(llm, bad):
    with pytest.raises(RequestError) as e:
        EngineCore(llm, kv_blocks=32, block_size=4, decode_step_tokens=bad)
    assert "decode_step_tokens must be 'auto', 'itl', None or an int in 1..3 x max_num_seqs (12)" in e.value.message


@pytest.mark.parametrize("bad", [0, 13, "many"])
def test_decode_step_tokens_set_later_is_checked_too(llm, bad):
    """set_decode_step_tokens (serve_load's per-level switch) refuses what the constructor does
    (it took any value: "many" failed later inside the scheduler, 0 ran one-row steps)."""
    core = EngineCore(llm, kv_blocks=32, block_size=4, decode_step_tokens=2)
    with pytest.raises(RequestError) as e:
        core.set_decode_step_tokens(bad)
    assert "decode_step_tokens must be 'auto', 'itl', None or an int in 1..3 x max_num_seqs (12)" in e.value.message
    assert core.decode_step_tokens == 2 and core.scheduler.row_budget == 2


def test_rows_are_off_by_default_and_auto_without_captured_steps_is_off(llm):
    core = EngineCore(llm, kv_blocks=32, block_size=4)
    assert core.decode_step_tokens is None and core.scheduler.row_budget is None
    core = EngineCore(llm, kv_blocks=32, block_size=4, decode_step_tokens="auto")    # the CPU: nothing to time
    assert core.decode_step_times == {} and core.decode_step_tokens is None
    assert core.runner.decoder.sizes == [1, 2, 4]                # and no row buckets past max_num_seqs


def test_rows_leave_a_prefix_hits_cached_positions_unwritten(llm, llm_one_seq):
    """A prefix hit admitted the warmed way (max_fresh: recomputed from position 0) and carried
    on in row steps recomputes its cached positions without writing them (slot -1): those
    blocks are shared, and another request may be reading them."""
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=4, decode_step_tokens=4)
    shared = [2, 4, 6, 8, 10, 12, 14, 16]
    prompts = [shared + [1], shared + [3, 5, 7, 9]]
    outs = [[] for _ in prompts]
    core.add(_request(llm, 0, prompts[0], outs))
    while core.has_work():
        core.step()
    core.scheduler.max_fresh = 2                        # as after a warm-up: a hit is recomputed from 0
    rows, start = [], core.runner.decoder.start_paged
    core.runner.decoder.start_paged = lambda ids, pos, slots, tables: rows.append(list(slots)) or start(
        ids, pos, slots, tables)
    core.add(_request(llm, 1, prompts[1], outs))
    core.step()                                         # positions 0..3 recomputed, packed
    r1 = core.scheduler.get("r1")
    assert r1.cached == 8 and r1.computed == 4
    core.step()                                         # positions 4..7 as rows: cached, not written
    assert rows[0] == [-1] * 4
    core.step()                                         # positions 8..11: written
    assert -1 not in rows[1] and len(rows[1]) == 4
    while core.has_work():
        core.step()
    assert outs == _alone(llm_one_seq, prompts)
