"""A step whose prefill chunks all start their prompt runs split (ModelRunner.split): the
decode rows in their bucket's step, each fresh prompt through the prefill graph of its token
bucket (engine/prefill_graphs.py, writing through the request's slot mapping; eager on the
CPU, replayed on a GPU) — with the tokens each prompt gets alone, greedy and seeded; steps
with a cached prefix or a later chunk keep the packed forward."""
from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request


PARAMS = [SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
          SamplingParams(temperature=0.8, top_k=20, seed=4, max_tokens=5, ignore_eos=True)]


def serve_one_per_step(core, llm, llm_one_seq, prompts):
    """Prompt i (greedy or seeded, alternately) arrives at step i, its prefill beside the
    earlier ones' decodes; each prompt's tokens, and the tokens it gets alone."""
    outs = [[] for _ in prompts]
    for i, p in enumerate(prompts):
        core.add(Request(f"r{i}", llm._sequences({"prompt_token_ids": p}, PARAMS[i % 2])[0],
                         sink=lambda out, i=i: outs[i].extend(out.token_ids)))
        core.step()
    while core.has_work():
        core.step()
    want = [llm_one_seq.generate({"prompt_token_ids": p}, PARAMS[i % 2])[0].outputs[0].token_ids
            for i, p in enumerate(prompts)]
    return outs, want


def test_fresh_prompts_beside_decodes_run_split_and_keep_their_tokens(llm, llm_one_seq):
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=8, split_prefill=True)
    runner = core.runner
    ways = []
    split, packed = runner.split, runner.prefill
    runner.split = lambda *a: ways.append("split") or split(*a)
    runner.prefill = lambda *a: ways.append("packed") or packed(*a)
    prompts = [[2, 4, 6], [8, 10, 12, 14, 16], [3, 5], [7, 9, 11, 13, 15, 17, 19, 21, 23, 25]]   # the last: 2 chunks
    outs, want = serve_one_per_step(core, llm, llm_one_seq, prompts)
    assert outs == want
    assert ways.count("split") >= 4 and "packed" in ways      # the long prompt's second chunk: packed
    assert runner.passes > core.steps                          # a split step: one pass per fresh prompt more
    assert sorted(runner.graphs.buckets) == [16]


def test_fresh_prompts_and_decodes_run_as_one_mixed_step_and_keep_their_tokens(llm, llm_one_seq):
    """MixedSteps: the fresh prompts' chunks and the decode rows in one forward whose every
    input is data in one buffer (a graph per (chunks, chunk bucket) on a GPU; eager here)."""
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=8, mixed_steps=True,
                      split_prefill=False)
    runner = core.runner
    ways = []
    mixed, packed = runner.mixed_step, runner.prefill
    runner.mixed_step = lambda *a: ways.append("mixed") or mixed(*a)
    runner.prefill = lambda *a: ways.append("packed") or packed(*a)
    prompts = [[2, 4, 6], [8, 10, 12, 14, 16], [3], [7, 9, 11, 13, 15, 17, 19, 21, 23, 25], [5, 1]]
    outs, want = serve_one_per_step(core, llm, llm_one_seq, prompts)
    assert outs == want
    assert ways.count("mixed") >= 4 and "packed" in ways        # the long prompt's second chunk: packed
    assert runner.passes == core.steps                           # one forward a step
    assert (1, 16) in runner.mixed.steps


def test_split_rows_sends_steps_without_decode_rows_or_with_many_split(llm, llm_one_seq):
    """With both forms built, `split_rows` picks per step: split when the step has no decode
    rows or at least split_rows of them (or more chunks than a mixed step holds), mixed
    otherwise — each prompt still gets its tokens alone (old code: mixed wherever it fits)."""
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=8, mixed_steps=True,
                      split_prefill=True)
    runner = core.runner
    runner.split_rows = 2
    ways = []
    split, mixed = runner.split, runner.mixed_step
    runner.split = lambda p, d: ways.append(("split", len(d))) or split(p, d)
    runner.mixed_step = lambda c, d, *w: ways.append(("mixed", len(d))) or mixed(c, d, *w)
    prompts = [[2, 4, 6], [8, 10, 12, 14, 16], [3, 5], [7, 9, 11]]
    outs, want = serve_one_per_step(core, llm, llm_one_seq, prompts)
    assert outs == want
    assert ways == [("split", 0), ("mixed", 1), ("split", 2), ("split", 3)]


def test_split_rows_lets_a_warmed_engine_admit_four_fresh_prompts_a_step(llm, llm_one_seq):
    """EngineCore(split_rows=...): the warm-up also runs the prefill graphs, and the scheduler
    admits up to 4 fresh prompts a step (old code: 2, the mixed steps' limit); a burst of 4
    goes split in one step, each prompt with its tokens alone."""
    core = EngineCore(llm, kv_blocks=32, block_size=4, max_num_batched_tokens=16, mixed_steps=True,
                      split_prefill=True, warm_up=True, split_rows=3)
    assert core.scheduler.max_fresh == 4 and core.runner.split_rows == 3 and core.warm_up_s > 0
    ways = []
    split = core.runner.split
    core.runner.split = lambda p, d: ways.append(len(p)) or split(p, d)
    prompts = [[2, 4, 6], [8, 10], [3, 5, 7], [9, 11]]
    outs = [[] for _ in prompts]
    for i, p in enumerate(prompts):
        core.add(Request(f"r{i}", llm._sequences({"prompt_token_ids": p}, PARAMS[i % 2])[0],
                         sink=lambda out, i=i: outs[i].extend(out.token_ids)))
    while core.has_work():
        core.step()
    assert ways == [4]
    assert outs == [llm_one_seq.generate({"prompt_token_ids": p}, PARAMS[i % 2])[0].outputs[0].token_ids
                    for i, p in enumerate(prompts)]


class SixSeqCore:
    """A warmed engine core of six sequences over the word model (with four, a mixed step cannot
    hold 3 chunks: R - C == 1) that records each prefill step's form, (way, chunks, decode
    rows), and serves the four prompts below, each with its tokens."""
    PROMPTS = [[2, 4, 6], [8, 10], [3, 5, 7], [9, 11]]

    def __init__(self, word_model, **options):
        from tilesafe.engine import LLM
        self.llm = LLM(str(word_model), device="cpu", max_model_len=32, max_num_seqs=6, progress=False)
        self.core = core = EngineCore(self.llm, kv_blocks=32, block_size=4, max_num_batched_tokens=16,
                                      mixed_steps=True, split_prefill=True, warm_up=True, **options)
        self.ways = []
        split, mixed = core.runner.split, core.runner.mixed_step
        core.runner.split = lambda p, d: self.ways.append(("split", len(p), len(d))) or split(p, d)
        core.runner.mixed_step = lambda c, d, *w: self.ways.append(("mixed", len(c), len(d))) or mixed(c, d, *w)
        self.outs = [[] for _ in self.PROMPTS]

    def add(self, i):
        self.core.add(Request(f"r{i}", self.llm._sequences({"prompt_token_ids": self.PROMPTS[i]}, PARAMS[i % 2])[0],
                              sink=lambda out: self.outs[i].extend(out.token_ids)))

    def drain(self):
        while self.core.has_work():
            self.core.step()

    def alone(self, llm_one_seq):
        return [llm_one_seq.generate({"prompt_token_ids": p}, PARAMS[i % 2])[0].outputs[0].token_ids
                for i, p in enumerate(self.PROMPTS)]


def test_split_rows_runs_three_fresh_prompts_beside_few_decodes_split_after_the_default_warm_up(word_model,
                                                                                                llm_one_seq):
    """The default warm-up captures mixed steps of 1-2 fresh prompts; with split_rows a step
    admits up to 4, so a step of 3 beside fewer than split_rows decode rows must run split
    (old code: a mixed step of 3 chunks, a shape warm-up never ran: compiled mid-serving)."""
    s = SixSeqCore(word_model, split_rows=3)
    s.add(0)
    s.core.step()                      # r0's prompt: it decodes from now on
    for i in (1, 2, 3):
        s.add(i)
    s.drain()
    assert s.ways[:2] == [("split", 1, 0), ("split", 3, 1)]
    assert all(w[1] <= 2 for w in s.ways if w[0] == "mixed")
    assert s.outs == s.alone(llm_one_seq)


def test_a_lone_fresh_prompt_replays_its_prefill_graph_after_the_default_warm_up(word_model, llm_one_seq):
    """The default warm-up also warms the prefill graphs; then a step of one fresh prompt and
    no decode rows runs split (its prefill graph: a mixed step's forward would be its chunk
    plus max_num_seqs sampled rows), while a prompt beside decodes, or two together, go mixed."""
    s = SixSeqCore(word_model)
    assert s.core.runner.split_alone and s.core.runner.split_rows is None
    s.add(0)
    s.core.step()                      # alone: split
    s.add(1)
    s.core.step()                      # beside r0's decode: mixed
    s.drain()
    s.add(2)
    s.add(3)
    s.drain()                          # two at once, no decodes: mixed
    assert s.ways == [("split", 1, 0), ("mixed", 1, 1), ("mixed", 2, 0)]
    assert s.outs == s.alone(llm_one_seq)
