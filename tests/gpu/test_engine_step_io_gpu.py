"""engine/step_io.py on a GPU: pinned staging, queued copies and one stream sync give the same
inputs and outputs as plain synchronising copies (the CPU tests: tests/engine/test_decode_host_path.py)."""
import numpy as np
import pytest
import torch

from tilesafe.engine.config import Qwen3Config
from tilesafe.engine.model import Activations
from tilesafe.engine.random_checkpoint import qwen3_config
from tilesafe.engine.step_io import StepIO

pytestmark = pytest.mark.gpu


def test_inputs_sent_and_outputs_received_through_pinned_buffers():
    cfg = Qwen3Config.from_dict(qwen3_config("tiny"), "tiny")
    a = Activations.allocate(cfg, 4, 4, torch.bfloat16, "cuda")
    io = StepIO(a)
    assert io.staged.is_pinned() and io.out_tokens.is_pinned()
    L = 64
    for r in range(3):                                    # the staging buffer is reused step after step
        ids, positions, slots = [r, 10 + r, 20 + r, 30 + r], [r, r + 1, r + 2, r + 3], [3, 1, 0, 2]
        io.send(ids, positions, slots, L)
        torch.cuda._sleep(1_000_000)                      # the device is behind: the copy is queued
        a.tokens.copy_(a.ids * 2)                         # a stand-in step on the same stream
        a.chosen.copy_(a.positions.float() * -0.5)
        tokens, chosen = io.receive()
        assert tokens == [2 * i for i in ids]
        assert chosen == [-0.5 * p for p in positions]
        want = [ids, positions, [p + 1 for p in positions], [s * L + p for s, p in zip(slots, positions)], slots]
        np.testing.assert_array_equal(a.inputs.cpu().numpy(), np.array(want, dtype=np.int32))
    assert not io.in_flight
