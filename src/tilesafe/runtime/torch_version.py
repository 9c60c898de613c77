"""Torch's version counter of a tensor, for the best-effort S13/S14 checks.

Inference tensors (made under `torch.inference_mode()`) have no counter: reading `_version`
raises. For them the counter reads as a constant 0, so torch writes to them go unseen: S13's
detection is documented as best-effort, and S14 then treats memory handed to torch as not
written by it (a refusal, never an uninitialised read)."""
from __future__ import annotations

import torch


def version_of(t: torch.Tensor) -> int:
    return 0 if t.is_inference() else t._version
