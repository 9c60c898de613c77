"""A mixed step's launch comes before the last step's outputs go out: the engine thread sends
them while the step runs on the device (as a decode step already did), not before launching
it — at 128 clients the sending took the host ~1 ms a step with the GPU idle."""
from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request

GREEDY = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


def test_the_last_steps_outputs_go_out_after_a_mixed_steps_launch(llm, llm_one_seq):
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, mixed_steps=True,
                      split_prefill=False)
    events, launch = [], core.runner.mixed._launch
    core.runner.mixed._launch = lambda step: events.append("launch") or launch(step)
    prompts = [[2, 4, 6, 8, 10], [3, 5, 7]]
    outs = [[] for _ in prompts]

    def add(i):
        def sink(out):
            events.append(f"r{i}")
            outs[i].extend(out.token_ids)
        core.add(Request(f"r{i}", llm._sequences({"prompt_token_ids": prompts[i]}, GREEDY)[0], sink=sink))
    add(0)
    core.step()                                     # r0's prompt: a mixed step; its first token held
    assert events == ["launch"]
    add(1)
    core.step()                                     # r1's prompt beside r0's decode row: mixed again
    assert core.runner.last_form == "mixed"
    assert events == ["launch", "launch", "r0"]     # r0's first token went out after the launch
    while core.has_work():
        core.step()
    assert outs == [llm_one_seq.generate({"prompt_token_ids": p}, GREEDY)[0].outputs[0].token_ids for p in prompts]


def test_a_mixed_step_is_waited_for_when_the_work_beside_it_raises(llm, monkeypatch):
    """The outputs sent while a mixed step runs may raise (EngineThread then fails the requests
    and serves on); the step is waited for before the error goes up, as its staging buffer is
    rewritten by the next step of its shape only after its sync (a CPU stand-in: the sync is
    the step's read of its tokens; the old run raised with the step in flight)."""
    import pytest
    import torch
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=16, mixed_steps=True,
                      split_prefill=False)
    events, launch = [], core.runner.mixed._launch
    core.runner.mixed._launch = lambda step: events.append("launch") or launch(step)
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: events.append("sync") or tolist(self))
    add = [Request(f"r{i}", llm._sequences({"prompt_token_ids": p}, GREEDY)[0], sink=lambda out: None)
           for i, p in enumerate([[2, 4, 6, 8, 10], [3, 5, 7]])]
    core.add(add[0])
    core.step()                                     # r0's prompt: a mixed step; its first token held

    def broken(in_step=False):
        events.append("raised")
        raise RuntimeError("an output could not be sent")
    monkeypatch.setattr(core, "_flush", broken)
    core.add(add[1])
    events.clear()
    with pytest.raises(RuntimeError, match="could not be sent"):
        core.step()                                 # r1's prompt beside r0's decode row: mixed
    assert core.runner.last_form == "mixed"
    assert events[events.index("launch"):][:3] == ["launch", "raised", "sync"]
