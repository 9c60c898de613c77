"""decode_step_tokens="itl" (row_policy.ItlRows): a step beside decode rows holds the rows whose
timed step keeps the inter-token bound, grows while the queued prompts would wait past the
decoding requests' lifetime, and is not held when the decodes alone miss the bound."""
from types import SimpleNamespace

import pytest

from tilesafe.serve.request import Request
from tilesafe.serve.row_policy import ITL_SHARE, ItlRows
from tilesafe.serve.scheduler import Scheduler

# Session 19's H200 buckets (4B, seconds per replay): the bound is 0.7 x 2 x 2.62 ms = 3.67 ms
S19 = {1: 2.62e-3, 2: 3.05e-3, 4: 2.98e-3, 8: 3.20e-3, 16: 3.29e-3, 32: 3.26e-3, 64: 3.34e-3, 128: 3.88e-3,
       256: 5.84e-3, 384: 7.50e-3}


def test_the_bound_is_a_share_of_twice_the_batch_one_step():
    policy = ItlRows.from_times(S19)
    assert policy.bound_s == pytest.approx(ITL_SHARE * 2 * 2.62e-3) == pytest.approx(3.668e-3)
    assert ItlRows.from_times({}) is None


@pytest.mark.parametrize("decode_rows, fill, queued, lifetime, rows", [
    (30, 32, 0, 64, 64),              # nothing queued: the largest bucket within the bound (128 is 3.88 ms)
    (2, 2, 30 * 128, 64, 64),         # a 32-client wave: 30 prompts prefilled in 62 steps < 64 (its lifetime)
    (21, 32, 11 * 128, 64, 64),       # 32 clients at equilibrium: 11 queued prompts, 33 steps
    (40, 64, 88 * 128, 64, 256),      # 128 clients: 88 queued prompts need 176+ prompt rows a step to keep up
    (40, 64, 88 * 128, 8, 384),       # ... with short lives no bucket keeps up: the largest
    (64, 64, 128, 64, 128),           # 64 decodes fill the bound's bucket: a queued prompt still gets rows
    (100, 128, 128, 64, 384),         # the decodes alone (128 rows, 3.88 ms) miss the bound: up to 2x theirs
    (0, 1, 128, 0.0, 384),            # nothing decodes: no gap to keep
])
def test_rows_by_the_bound_and_the_queue(decode_rows, fill, queued, lifetime, rows):
    assert ItlRows.from_times(S19).limit(decode_rows, fill, queued, lifetime) == rows


def _req(rid, n_prompt, order, max_tokens):
    seq = SimpleNamespace(prompt_ids=list(range(n_prompt)), tokens=[], params=SimpleNamespace(max_tokens=max_tokens))
    return Request(rid, seq, sink=lambda out: None, order=order)


def _three_decoding(max_tokens):
    """A scheduler of ItlRows over buckets 1-12 (bound 0.7 x 2 x 1.0 = 1.4: bucket 4) with three
    decoding 3-token requests that live `max_tokens` tokens (params shared: mutable)."""
    s = Scheduler(max_num_seqs=4, max_model_len=64, num_blocks=64, block_size=4,
                  row_budget=ItlRows.from_times({1: 1.0, 2: 1.1, 4: 1.3, 8: 2.0, 12: 2.7}),
                  row_buckets=[1, 2, 4, 8, 12])
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
    the decodes' 32-token life: one prompt row beside them."""
    s, decoding = _three_decoding(32)
    p = _req("p", 20, 9, 32)
    s.add(p)
    plan = s.schedule()
    assert plan.rows and plan.decode == decoding and plan.prefill == [(p, 1)]


def test_past_keeping_up_a_fresh_prompt_goes_whole_and_one_under_way_finishes_as_rows():
    """Decodes that live 8 tokens: 20 steps of 4 rows are too slow for the queue. A fresh prompt
    then goes whole beside them (the steps without rows); a prompt already under way finishes in
    rows grown to keep up (bucket 8: 39 queued tokens in 8 steps of 5) and the queue waits for
    the next step (before: any prompt beside decodes went as rows of the bound's bucket)."""
    s, decoding = _three_decoding(8)
    p = _req("p", 20, 9, 8)
    s.add(p)
    plan = s.schedule()
    assert not plan.rows and plan.decode == decoding and plan.prefill == [(p, 20)]

    s, decoding = _three_decoding(32)
    p, q = _req("p", 20, 9, 32), _req("q", 20, 10, 32)
    s.add(p)
    _decoded(s, s.schedule())                       # p's first row: under way
    s.add(q)
    for r in decoding:
        r.seq.params.max_tokens = 8
    plan = s.schedule()
    assert plan.rows and plan.prefill == [(p, 5)] and list(s.waiting) == [q]
