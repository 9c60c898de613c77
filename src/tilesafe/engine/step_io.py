"""The host side of one decode step: its inputs sent, its tokens read back, one sync a token.

A decode step's inputs (token, position, cache length, cache row and slot of each sequence)
are written into a host staging buffer, pinned on a GPU, and copied to the step's device
buffer without waiting (`non_blocking`): a copy from pageable memory, or a `torch.tensor`
made per token, costs a stream synchronisation and an allocation each. The outputs (tokens
and their log-probabilities) come back through pinned buffers by two queued copies and one
synchronisation, instead of one synchronising copy each. That sync is the only host wait of
a step; the staging buffer is rewritten only after it (or after a full sync, if an error
left a copy in flight).
"""
from __future__ import annotations

import torch

from .model import Activations


class StepIO:
    def __init__(self, a: Activations):
        self.inputs, self.tokens, self.chosen = a.inputs, a.tokens, a.chosen
        self.cuda = a.inputs.device.type == "cuda"
        rows, batch = a.inputs.shape
        self.staged = torch.empty((rows, batch), dtype=torch.int32, pin_memory=self.cuda)
        self.rows = self.staged.numpy()      # the same memory, written without torch's per-op cost
        self.out_tokens = torch.empty(a.tokens.shape, dtype=a.tokens.dtype, pin_memory=self.cuda)
        self.out_chosen = torch.empty(a.chosen.shape, dtype=a.chosen.dtype, pin_memory=self.cuda)
        self.in_flight = False               # a copy from `staged` may still be queued

    def send(self, ids: list[int], positions: list[int], slots: list[int], max_model_len: int) -> None:
        """Rows of the step's input buffer: ids, positions, cache lengths, cache rows, slots."""
        if self.in_flight:                   # a step that raised before reading its tokens back
            torch.cuda.synchronize(self.inputs.device)
        r = self.rows
        r[0] = ids
        r[1] = positions
        r[2] = r[1] + 1
        r[3] = [s * max_model_len + p for s, p in zip(slots, positions)]   # Python ints: overflow raises
        r[4] = slots
        self.in_flight = self.cuda
        self.inputs.copy_(self.staged, non_blocking=True)

    def receive(self) -> tuple[list[int], list[float]]:
        """The step's tokens and their log-probabilities, once the step has run."""
        if not self.cuda:
            return self.tokens.tolist(), self.chosen.tolist()
        self.out_tokens.copy_(self.tokens, non_blocking=True)
        self.out_chosen.copy_(self.chosen, non_blocking=True)
        torch.cuda.current_stream(self.tokens.device).synchronize()
        self.in_flight = False
        return self.out_tokens.tolist(), self.out_chosen.tolist()
