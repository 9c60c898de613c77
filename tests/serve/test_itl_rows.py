"""decode_step_tokens="itl" (row_policy.ItlRows): a step beside decode rows holds the rows whose
timed step keeps the inter-token bound while those rows keep up with the queued prompts (within
the decoding requests' lifetime); past that, fresh prompts go whole as without rows."""
from types import SimpleNamespace

import pytest

from tilesafe.serve.request import Request
from tilesafe.serve.row_policy import ITL_SHARE, ItlRows
from tilesafe.serve.scheduler import Scheduler

# Session 19's H200 buckets (4B, seconds per replay): the bound is 2 x 2.62 = 5.24 ms (ITL_SHARE 1.0), 3.67 at 0.7
S19 = {1: 2.62e-3, 2: 3.05e-3, 4: 2.98e-3, 8: 3.20e-3, 16: 3.29e-3, 32: 3.26e-3, 64: 3.34e-3, 128: 3.88e-3,
       256: 5.84e-3, 384: 7.50e-3}


def test_the_bound_is_a_share_of_twice_the_batch_one_step():
    assert ItlRows.from_times(S19).bound_s == pytest.approx(ITL_SHARE * 2 * 2.62e-3)
    assert ItlRows.from_times(S19, 0.7).bound_s == pytest.approx(3.668e-3)
    assert ItlRows.from_times({}) is None


@pytest.mark.parametrize("share, decode_rows, fill, rows", [
    (1.0, 30, 32, 128),       # the largest bucket within 5.24 ms: 128 rows, 3.88 ms (256 rows take 5.84)
    (1.0, 2, 2, 128),
    (0.7, 30, 32, 64),        # within 3.67 ms: 64 rows, 3.34 ms
    (0.7, 100, 128, 384),     # 100 decodes alone (128 rows, 3.88 ms) miss 3.67 ms: no gap to keep
    (1.0, 0, 1, 384),         # nothing decodes: no gap to keep
])
def test_rows_within_the_bound(share, decode_rows, fill, rows):
    assert ItlRows.from_times(S19, share).limit(decode_rows, fill) == rows


@pytest.mark.parametrize("share, decode_rows, fill, queued, prompts, lifetime, keeps_up", [
    (1.0, 2, 2, 30 * 128, 30, 64, True),      # a 32-client wave: 30 prompts in 31 steps of 128 rows, within 64
    (0.7, 2, 2, 30 * 128, 30, 64, True),      # ... or in 62 steps of 64 rows
    (0.7, 21, 32, 11 * 128, 11, 64, True),    # 32 clients at equilibrium, 64 rows: 43 prompt rows >= 21 x 2
    (1.0, 40, 64, 88 * 128, 88, 64, False),   # 128 clients: 88 queued prompts need 128 steps of 128 rows
    (1.0, 124, 128, 128, 1, 64, False),       # one prompt in 32 steps, but 4 prompt rows a step beside 124
    #                                           decodes free slots faster than it fills them
    (1.0, 30, 32, 0, 0, 0.0, True),           # nothing queued
    (0.7, 100, 128, 0, 0, 64, False),         # the decodes alone miss the bound
    (1.0, 0, 1, 128, 1, 0.0, False),          # nothing decodes
])
def test_rows_keep_up_while_the_queue_is_prefilled_in_time_and_in_pace(share, decode_rows, fill, queued, prompts,
                                                                       lifetime, keeps_up):
    assert ItlRows.from_times(S19, share).keeps_up(decode_rows, fill, queued, prompts, lifetime) is keeps_up


def _req(rid, n_prompt, order, max_tokens):
    seq = SimpleNamespace(prompt_ids=list(range(n_prompt)), tokens=[], params=SimpleNamespace(max_tokens=max_tokens))
    return Request(rid, seq, sink=lambda out: None, order=order)


def _three_decoding(max_tokens, max_num_seqs=4):
    """A scheduler of ItlRows over buckets 1-8 (bound 0.7 x 2 x 1.0 = 1.4: bucket 4) with three
    decoding 3-token requests that live `max_tokens` tokens (params shared: mutable)."""
    s = Scheduler(max_num_seqs=max_num_seqs, max_model_len=64, num_blocks=64, block_size=4,
                  row_budget=ItlRows.from_times({1: 1.0, 2: 1.1, 4: 1.3, 8: 2.0}, 0.7), row_buckets=[1, 2, 4, 8])
    decoding = [_req(f"d{i}", 3, i, max_tokens) for i in range(3)]
    for r in decoding:
        s.add(r)
    for r, n in s.schedule().prefill:               # nothing decodes yet: whole prompts, not rows
        s.computed(r, n)
        r.seq.tokens.append(7)
    return s, decoding


def _decoded(s, plan):
    for r, n in plan.prefill:
        s.computed(r, n)
    for r in plan.decode:
        s.computed(r, 1)
        r.seq.tokens.append(7)


def test_rows_within_the_bound_while_they_keep_up():
    """Three decodes (bucket 4) and a 20-token prompt: 4-row steps prefill it in 20 steps, within
    the decodes' 64-token life, at a prompt row a step (>= 3 decodes x 20 / 64): one prompt row
    beside them."""
    s, decoding = _three_decoding(64)
    p = _req("p", 20, 9, 64)
    s.add(p)
    plan = s.schedule()
    assert plan.rows and plan.decode == decoding and plan.prefill == [(p, 1)]


def test_past_keeping_up_a_fresh_prompt_goes_whole_and_one_under_way_finishes_as_rows():
    """Decodes that live 8 tokens: 20 steps of 4 rows are too slow for the queue. A fresh prompt
    then goes whole beside them (the steps without rows); a prompt already under way goes on in
    rows while the queue waits for the next step (before: any prompt beside decodes went as
    rows, and new ones joined them)."""
    s, decoding = _three_decoding(8)
    p = _req("p", 20, 9, 8)
    s.add(p)
    plan = s.schedule()
    assert not plan.rows and plan.decode == decoding and plan.prefill == [(p, 20)]

    s, decoding = _three_decoding(64)
    p, q = _req("p", 20, 9, 64), _req("q", 20, 10, 64)
    s.add(p)
    _decoded(s, s.schedule())                       # p's first row: under way
    s.add(q)
    for r in decoding:
        r.seq.params.max_tokens = 8
    plan = s.schedule()
    assert plan.rows and plan.prefill == [(p, 1)] and list(s.waiting) == [q]


@pytest.mark.parametrize("max_tokens, admits", [(64, True), (2, False)])
def test_rows_past_keeping_up_finish_the_prompt_under_way_and_admit_no_other(max_tokens, admits):
    """A 3-token prompt under way (one row taken beside three decodes), then 8-row steps within
    the bound: it finishes in 2 rows, leaving 3. While the rows keep up (decodes living 64
    tokens) the queued prompt takes them; past that (2 tokens: 22 queued tokens need 5 steps)
    it waits for a step without rows. (The queued prompt has rows left over here, so admitting
    anyway would show.)"""
    s, decoding = _three_decoding(64, max_num_seqs=8)
    p, q = _req("p", 3, 9, 64), _req("q", 20, 10, 64)
    s.add(p)
    _decoded(s, s.schedule())                       # p's first row: under way, 2 to go
    assert p.computed == 1
    s.row_budget = ItlRows.from_times({1: 1.0, 2: 1.1, 4: 1.3, 8: 1.35}, 0.7)      # 8 rows: 5 beside the decodes
    s.add(q)
    for r in decoding:
        r.seq.params.max_tokens = max_tokens
    plan = s.schedule()
    assert plan.rows and plan.decode == decoding and plan.prefill[0] == (p, 2)
    assert plan.prefill[1:] == ([(q, 3)] if admits else []) and list(s.waiting) == ([] if admits else [q])
