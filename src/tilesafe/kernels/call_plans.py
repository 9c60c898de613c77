"""Plans of library calls, cached by the layout of the caller's arguments.

A library call decides a lot from its arguments' layouts alone: dtypes and devices agree,
the result's shape, which kernel runs (in place or not), how the tensors are viewed at
the kernel's rank, the tile and the config. Those decisions are the same for every call
whose arguments have the same layout, so a call keeps them in a plan keyed by that layout
and the next such call — with new torch tensors, as a user has them — reads them back.

What a layout does not decide is done on every call: borrowing torch tensors (S13),
allocating the result, the whole-call alias check of a caller's `out=` (call_checks), and
the launch, whose own checks the runtime caches by layout too (runtime/launch_cache.py).
A call that is unusual in any way (a lent or handed-over tensor, an argument that is not a
tensor, a `config=` override) takes the full path, which refuses it with its own message
or makes the plan.
"""
from __future__ import annotations

import torch

from ..runtime.tensor import Tensor

_LIMIT = 256        # plans per library function family; more distinct layouts start over


def layout_of(x):
    """The facts of one argument a plan depends on; None when the call must take the full path."""
    if type(x) is Tensor:
        if x._handed_at is not None or (x._lender is not None and x._lender() is not None):
            return None                    # the full path raises the ownership error
        t = x._t
        return (Tensor, x._dtype, t.shape, t.stride(), t.get_device())
    if isinstance(x, torch.Tensor):
        if x.layout is not torch.strided:
            return None
        return (torch.Tensor, x.dtype, x.shape, x.stride(), x.get_device(), x.requires_grad)
    return None


class PlanCache:
    """Plans by key, forgotten all at once when too many layouts were seen."""
    __slots__ = ("plans",)

    def __init__(self):
        self.plans: dict = {}

    def get(self, key):
        return self.plans.get(key) if key is not None else None

    def put(self, key, plan) -> None:
        if key is None:
            return
        if len(self.plans) >= _LIMIT:
            self.plans.clear()
        self.plans[key] = plan
