"""The serving engine's decode steps are the offline engine's (engine/decode_step.py,
engine/step_io.py) over the paged cache: inputs staged with each row's block table written
incrementally, padding rows up to the bucket, an all-greedy batch taking its tokens from the
LM head's argmax, and a start-up warm-up that runs every bucket before the first request."""
import numpy as np
import pytest
import torch

from tilesafe.engine import SamplingParams
from tilesafe.engine.config import Qwen3Config
from tilesafe.engine.decode_step import bucket_sizes
from tilesafe.engine.model import Activations
from tilesafe.engine.random_checkpoint import qwen3_config
from tilesafe.engine.step_io import StepIO, paged_activations
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request


def paged_io(batch, width):
    cfg = Qwen3Config.from_dict(qwen3_config("tiny"), "tiny")
    a = paged_activations(Activations.allocate(cfg, batch, batch, torch.float32, "cpu"), width)
    return a, StepIO(a)


def test_send_paged_fills_real_rows_then_padding_rows():
    a, io = paged_io(4, 3)
    t0, t1 = [5, 2], [7]
    io.send_paged([11, 12], [6, 1], [22, 29], [t0, t1])
    np.testing.assert_array_equal(a.ids.numpy(), [11, 12, 0, 0])
    np.testing.assert_array_equal(a.positions.numpy(), [6, 1, 0, 0])
    np.testing.assert_array_equal(a.lens.numpy(), [7, 2, 1, 1])            # padding rows: length 1
    np.testing.assert_array_equal(a.slots.numpy(), [22, 29, -1, -1])      # padding rows write nothing
    np.testing.assert_array_equal(a.tables.numpy(), [[5, 2, 0], [7, 0, 0], [0, 0, 0], [0, 0, 0]])


def test_a_rows_table_is_written_incrementally_and_rewritten_for_a_new_owner():
    a, io = paged_io(2, 4)
    t0, t1 = [5], [7, 8, 9]
    io.send_paged([1, 2], [0, 9], [20, 36], [t0, t1])
    io._tables[0, 0] = 99                       # poison an entry already sent: an unchanged row keeps it
    t0.append(3)                                # the request's live table grew by a block
    io.send_paged([1, 2], [4, 10], [12, 37], [t0, t1])
    np.testing.assert_array_equal(a.tables.numpy(), [[99, 3, 0, 0], [7, 8, 9, 0]])
    other = [4]                                 # another request takes row 1: its whole row, tail zeroed
    io.send_paged([1, 2], [5, 0], [13, 16], [t0, other])
    np.testing.assert_array_equal(a.tables.numpy()[1], [4, 0, 0, 0])
    io.send_paged([1], [6], [14], [t0])         # row 1 becomes padding: zeros
    np.testing.assert_array_equal(a.tables.numpy(), [[99, 3, 0, 0], [0, 0, 0, 0]])
    io.send_paged([1, 2], [6, 0], [14, 16], [t0, other])   # back: rewritten whole, not from a stale length
    np.testing.assert_array_equal(a.tables.numpy()[1], [4, 0, 0, 0])


def test_rows_sharing_a_table_move_between_steps_and_stay_right():
    """A row step's prompt rows share their request's table and land on other rows as the
    decode rows change: each run is the table, every row after the run's first a copy of it."""
    a, io = paged_io(7, 4)
    d0, d1, p, q = [5], [6, 1], [7, 8], [9]

    def want(tables):
        w = np.zeros((7, 4), dtype=np.int32)
        for i, t in enumerate(tables):
            w[i, :len(t)] = t
        return w
    for tables in ([d0, p, p, p, q, q], [d0, d1, p, p, q, q, q], [d0, d1, q, q], [p, d0, p, q, q, d1]):
        if tables[1] is d1:
            p.append(len(p) + 20)               # p's live table grew between steps
        n = len(tables)
        io.send_paged([1] * n, list(range(n)), list(range(n)), tables)
        np.testing.assert_array_equal(a.tables.numpy(), want(tables))


def add(core, llm, name, ids, params, got):
    core.add(Request(name, llm._sequences({"prompt_token_ids": ids}, params)[0],
                     sink=lambda out: got.extend(out.token_ids)))


def test_greedy_batches_take_the_argmax_step_and_sampled_ones_the_sampler(llm, llm_one_seq):
    """Old code: the serving decode always ran the sampler's step (no greedy step)."""
    core = EngineCore(llm, kv_blocks=32, block_size=4)
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    seeded = SamplingParams(temperature=0.8, max_tokens=4, seed=5, ignore_eos=True)
    outs = [[], [], []]
    add(core, llm, "g0", [2, 4, 6], greedy, outs[0])
    add(core, llm, "g1", [8, 10], greedy, outs[1])
    while core.has_work():
        core.step()
    assert core.runner.decoder.steps[2].eager_runs == {True: 3}            # 2 greedy requests, 3 decode steps
    add(core, llm, "s0", [12, 14], seeded, outs[2])
    while core.has_work():
        core.step()
    assert core.runner.decoder.steps[1].eager_runs == {False: 3}
    alone = [llm_one_seq.generate({"prompt_token_ids": p}, sp)[0].outputs[0].token_ids
             for p, sp in (([2, 4, 6], greedy), ([8, 10], greedy), ([12, 14], seeded))]
    assert outs == alone


def test_after_warm_up_serving_any_prompt_length_compiles_nothing(llm, llm_one_seq, compiles):
    """Every decode bucket (greedy and sampled) and every prefill step shape is run at
    start-up; then prompts of every length, chunked beside running decodes, with prefix
    hits, compile no kernel and still get the tokens of each prompt alone."""
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, warm_up="full",  # own pool
                      mixed_steps=True, split_prefill=True)       # every kind of step, as on a GPU
    steps = core.runner.decoder.steps
    assert sorted(steps) == bucket_sizes(4) == [1, 2, 4]
    assert all(s.eager_runs == {True: 1, False: 1} for s in steps.values())
    assert core.scheduler.blocks.stats().used == 0
    assert float(core.runner.cache.k[0].abs().sum()) == 0.0              # padding rows wrote no KV
    before = compiles()
    greedy = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    seeded = SamplingParams(temperature=0.8, seed=2, max_tokens=3, ignore_eos=True)
    lengths = [1, 2, 3, 5, 7, 9, 12, 14, 16, 17, 19, 22, 25, 26, 28]
    prompts = [[(5 * i + n) % 90 + 1 for i in range(n)] for n in lengths]
    prompts[13][:12] = prompts[12][:12]                                   # a prefix hit (3 blocks)
    outs = [[] for _ in prompts]
    for i in range(0, len(prompts), 3):                                   # three arrive together
        for j in range(i, min(i + 3, len(prompts))):
            add(core, llm, f"c{j}", prompts[j], seeded if j % 4 == 1 else greedy, outs[j])
        core.step()
    while core.has_work():
        core.step()
    assert compiles() == before
    assert core.scheduler.blocks.stats().hits > 0
    want = [llm_one_seq.generate({"prompt_token_ids": p}, seeded if j % 4 == 1 else greedy)[0].outputs[0].token_ids
            for j, p in enumerate(prompts)]
    assert outs == want


def test_a_bad_warm_up_value_is_refused(llm):
    from tilesafe.engine import RequestError
    with pytest.raises(RequestError, match="warm_up must be True, False, 'full' or None, got 'all'"):
        EngineCore(llm, kv_blocks=32, block_size=4, warm_up="all")
