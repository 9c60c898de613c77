"""The host side of a decode step (engine/step_io.py, the decode loop of LLM._wave): inputs staged
and sent in one queued copy, tokens read back with one sync, and no per-token sampler upload
for an all-greedy batch (its rows draw no random number) — with the tokens unchanged."""
import numpy as np
import pytest
import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.model import Activations
from tilesafe.engine.random_checkpoint import qwen3_config
from tilesafe.engine.config import Qwen3Config
from tilesafe.engine.sampler import Sampler
from tilesafe.engine.step_io import StepIO


def tiny_activations(batch):
    cfg = Qwen3Config.from_dict(qwen3_config("tiny"), "tiny")
    return Activations.allocate(cfg, batch, batch, torch.float32, "cpu")


def test_send_writes_the_step_inputs_rows():
    a = tiny_activations(3)
    io = StepIO(a)
    ids, positions, slots, L = [5, 17, 2], [0, 9, 4], [2, 0, 1], 32
    io.send(ids, positions, slots, L)
    want = np.array([ids, positions, [p + 1 for p in positions], [s * L + p for s, p in zip(slots, positions)],
                     slots], dtype=np.int32)
    np.testing.assert_array_equal(a.inputs.numpy(), want)
    np.testing.assert_array_equal(a.tables.numpy()[:, 0], slots)   # the block table row is the slots row
    io.send([1, 1, 1], [3, 3, 3], [0, 1, 2], L)                     # the staging buffer is reused
    np.testing.assert_array_equal(a.ids.numpy(), [1, 1, 1])
    np.testing.assert_array_equal(a.slots.numpy(), [3, 35, 67])


def test_a_cache_row_beyond_int32_is_refused_not_wrapped():
    io = StepIO(tiny_activations(1))
    with pytest.raises(OverflowError):
        io.send([1], [5], [1 << 20], 1 << 12)                      # slot * max_model_len + position >= 2**31


def test_receive_reads_the_tokens_and_logprobs():
    a = tiny_activations(2)
    a.tokens.copy_(torch.tensor([7, 3], dtype=torch.int32))
    a.chosen.copy_(torch.tensor([-0.5, -2.25]))
    assert StepIO(a).receive() == ([7, 3], [-0.5, -2.25])


def _counted_set_steps(monkeypatch):
    calls = []
    real = Sampler.set_steps

    def set_steps(self, steps):
        calls.append(list(steps))
        return real(self, steps)
    monkeypatch.setattr(Sampler, "set_steps", set_steps)
    return calls


def test_an_all_greedy_batch_uploads_no_sampler_steps_per_token(checkpoint, hf_greedy, monkeypatch):
    folder, model = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False)
    calls = _counted_set_steps(monkeypatch)
    prompts = [[3, 14, 15, 9], [2, 6]]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(temperature=0, max_tokens=5))
    assert calls == [[0, 0]]                                         # the wave's start only
    for p, out in zip(prompts, outs):                                # the tokens are transformers' greedy ones
        assert out.outputs[0].token_ids == hf_greedy(model, p, 5)[0]


def test_a_sampling_batch_still_sets_each_rows_step(checkpoint, monkeypatch):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False)
    params = [SamplingParams(temperature=0, max_tokens=3), SamplingParams(temperature=0.8, seed=1, max_tokens=3)]
    alone = llm.generate({"prompt_token_ids": [4, 5, 6]}, params[1])[0].outputs[0].token_ids
    calls = _counted_set_steps(monkeypatch)
    outs = llm.generate([{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [4, 5, 6]}], params)
    assert calls == [[0, 0], [1, 1], [2, 2]]                         # one Philox step per token and row
    assert outs[1].outputs[0].token_ids == alone                     # a seeded row samples as it does alone
