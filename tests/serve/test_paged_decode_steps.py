"""The serving engine's decode steps are the offline engine's (engine/decode_step.py,
engine/step_io.py) over the paged cache: inputs staged with each row's block table written
incrementally, padding rows up to the bucket, an all-greedy batch taking its tokens from the
LM head's argmax, and a start-up warm-up that runs every bucket before the first request."""
import numpy as np
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


def test_warm_up_runs_every_bucket_greedy_and_sampled_before_serving(llm, llm_one_seq):
    core = EngineCore(llm, kv_blocks=40, block_size=4, warm_up=True)      # its own pool (zeroed)
    steps = core.runner.decoder.steps
    assert sorted(steps) == bucket_sizes(4) == [1, 2, 4]
    assert all(s.eager_runs == {True: 1, False: 1} for s in steps.values())
    st = core.scheduler.blocks.stats()
    assert st.used == 0 and float(core.runner.cache.k[0].abs().sum()) == 0.0   # padding rows wrote no KV
    got = []
    add(core, llm, "w", [3, 1, 4], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True), got)
    while core.has_work():
        core.step()
    want = llm_one_seq.generate({"prompt_token_ids": [3, 1, 4]},
                                SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0].outputs[0]
    assert got == want.token_ids
