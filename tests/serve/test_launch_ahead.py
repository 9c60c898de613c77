"""Decode steps launched ahead (EngineCore.launch_ahead): while only greedy decodes run, the
engine launches step N + 1 — each request fed step N's token, on the device — before it reads
step N's tokens. These tests run the engine core step by step on the CPU (the same code path
as the GPU's, eagerly) and check what must hold whatever was launched ahead: every request gets
the offline engine's tokens for its prompt alone; a request that ends by a stop token, is
aborted or arrives while a step is launched ahead changes nobody's tokens; a token that starts a
block is given one ahead; the chain stops where it cannot know the next step (the last token, a
sampled batch, a waiting request, no free block); every block comes back."""
import pytest

from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request

PROMPTS = {"a": [2, 4, 6], "b": [8, 10, 12, 14, 16], "c": [3, 5, 7, 9]}
GREEDY = SamplingParams(temperature=0, max_tokens=14, ignore_eos=True)


def alone(llm_one_seq, prompt, params):
    return llm_one_seq.generate({"prompt_token_ids": prompt}, params)[0].outputs[0].token_ids


def add(core, llm, outs, rid, prompt, params):
    seq = llm._sequences({"prompt_token_ids": prompt}, params)[0]
    outs[rid] = []
    core.add(Request(rid, seq, sink=lambda out: outs[rid].extend(out.token_ids)))


def serve(core, llm, requests, on_step=None) -> dict:
    """Run the core until idle; `on_step(step_index, outs)` may add or abort between steps."""
    outs = {}
    for rid, (prompt, params) in requests.items():
        add(core, llm, outs, rid, prompt, params)
    i = 0
    while core.has_work():
        core.step()
        i += 1
        if on_step:
            on_step(i, outs)
    core.step() if core._ahead else None          # nothing may be left launched ahead once idle
    return outs


@pytest.fixture
def core(llm):
    return EngineCore(llm, kv_blocks=40, block_size=4, warm_up=False)


def test_steps_launched_ahead_give_each_prompt_its_offline_tokens(core, llm, llm_one_seq):
    outs = serve(core, llm, {rid: (p, GREEDY) for rid, p in PROMPTS.items()})
    assert outs == {rid: alone(llm_one_seq, p, GREEDY) for rid, p in PROMPTS.items()}
    adopted, dropped = core.ahead_steps
    assert adopted >= 10 and dropped == 0       # 14 tokens each: all but the first steps launched ahead
    assert core._ahead is None and core.scheduler.blocks.stats().used == 0


def test_a_step_launched_ahead_across_a_block_boundary_writes_into_a_block_given_ahead(core, llm, llm_one_seq):
    """Blocks of 4: every fourth step's token starts a block, which the launch gives the
    request before the token is known; each launch stops before a request's last token."""
    launched = []
    real = core.runner.launch_ahead
    core.runner.launch_ahead = lambda ticket: launched.append([(r.computed + 1, len(r.seq.tokens) + 1)
                                                               for r in ticket[0]]) or real(ticket)
    outs = serve(core, llm, {"a": (PROMPTS["a"], GREEDY)})
    assert outs["a"] == alone(llm_one_seq, PROMPTS["a"], GREEDY)
    positions = [position for (position, made), in launched]
    assert any(p % 4 == 0 for p in positions)                          # a new block ahead of its token
    assert all(made < GREEDY.max_tokens for (position, made), in launched)
    assert core.ahead_steps == [len(launched), 0] and core.scheduler.blocks.stats().used == 0


def test_no_step_is_launched_ahead_without_a_free_block(llm, llm_one_seq):
    """A cache of 8 blocks of 4 positions, two requests of 23 and 25 tokens (12 blocks): a
    launch that needs a new block when none is free launches nothing, and the step that
    follows preempts as without launching ahead."""
    core = EngineCore(llm, kv_blocks=8, block_size=4, warm_up=False)
    results = []
    real = core.runner.launch_ahead
    core.runner.launch_ahead = lambda ticket: results.append(real(ticket)) or results[-1]
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    requests = {"a": (PROMPTS["a"], params), "b": (PROMPTS["b"], params)}
    outs = serve(core, llm, requests)
    assert outs == {rid: alone(llm_one_seq, p, params) for rid, (p, _) in requests.items()}
    assert None in results and core.preemptions >= 1
    assert core.ahead_steps[0] == sum(r is not None for r in results) - core.ahead_steps[1] > 0
    assert core.scheduler.blocks.stats().used == 0


def test_a_request_ending_by_a_stop_token_drops_its_row(core, llm, llm_one_seq):
    stop_at = alone(llm_one_seq, PROMPTS["b"], GREEDY)[6]           # b's 7th token ends it
    stopping = SamplingParams(temperature=0, max_tokens=14, stop_token_ids=[stop_at])
    requests = {"a": (PROMPTS["a"], GREEDY), "b": (PROMPTS["b"], stopping), "c": (PROMPTS["c"], GREEDY)}
    outs = serve(core, llm, requests)
    assert outs == {rid: alone(llm_one_seq, p, params) for rid, (p, params) in requests.items()}
    assert len(outs["b"]) <= 7 and core.scheduler.blocks.stats().used == 0


def test_an_abort_while_a_step_runs_ahead_leaves_the_others_tokens(core, llm, llm_one_seq):
    def abort_b(i, outs):
        if i == 6:
            assert core.ahead_requests                  # b's next step is in flight
            core.abort("b")
    outs = serve(core, llm, {rid: (p, GREEDY) for rid, p in PROMPTS.items()}, abort_b)
    for rid in ("a", "c"):
        assert outs[rid] == alone(llm_one_seq, PROMPTS[rid], GREEDY)
    assert 0 < len(outs["b"]) < GREEDY.max_tokens
    assert outs["b"] == alone(llm_one_seq, PROMPTS["b"], GREEDY)[:len(outs["b"])]
    assert core.scheduler.blocks.stats().used == 0


def test_an_arrival_waits_for_the_step_launched_ahead_then_joins(core, llm, llm_one_seq):
    joined = {}

    def arrive(i, outs):
        if i == 5:
            assert core.ahead_requests
            add(core, llm, outs, "c", PROMPTS["c"], GREEDY)
        if "c" in outs and "at" not in joined and core.scheduler.get("c").running:
            joined["at"] = i
    outs = serve(core, llm, {"a": (PROMPTS["a"], GREEDY), "b": (PROMPTS["b"], GREEDY)}, arrive)
    assert joined["at"] == 7                    # step 6 runs the step launched ahead, step 7 admits c
    assert outs == {rid: alone(llm_one_seq, p, GREEDY) for rid, p in PROMPTS.items()}


def test_sampled_batches_and_launch_ahead_false_launch_nothing_ahead(llm, llm_one_seq):
    sampled = SamplingParams(temperature=0.8, seed=3, max_tokens=10, ignore_eos=True)
    for launch_ahead, params in ((True, sampled), (False, GREEDY)):
        core = EngineCore(llm, kv_blocks=40, block_size=4, warm_up=False, launch_ahead=launch_ahead)
        outs = serve(core, llm, {rid: (p, params) for rid, p in PROMPTS.items()})
        assert outs == {rid: alone(llm_one_seq, p, params) for rid, p in PROMPTS.items()}
        assert core.ahead_steps == [0, 0]


def test_the_next_step_is_launched_before_this_ones_outputs_go_out_and_its_wait(core, llm):
    events = []
    runner = core.runner
    for name in ("start_decode", "launch_ahead", "finish_decode"):
        real = getattr(runner, name)
        setattr(runner, name, lambda *a, real=real, name=name: events.append(name) or real(*a))
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    seq = llm._sequences({"prompt_token_ids": PROMPTS["a"]}, params)[0]
    core.add(Request("a", seq, sink=lambda out: events.append("send")))
    while core.has_work():
        core.step()
    # The prefill's token goes out while decode 1 runs; decode 1 launches decode 2 ahead, which
    # launches decode 3 (the last token: nothing after it); each wait after the launch and the send.
    assert events == ["start_decode", "launch_ahead", "send", "finish_decode",
                      "launch_ahead", "send", "finish_decode", "send", "finish_decode", "send"]
