"""The launch fast path: a repeated launch with the same arguments skips re-checking.

Tensors and partitions are immutable views, so the same objects mean the same shapes,
strides and bytes: binding, the specialization, the bounds masks and the aliasing verdict
all still hold, and initialisation (S14) can only have grown. What can change between two
launches is re-checked here: a partition may have been unpartitioned, a Ref tensor may
have been lent or handed to torch since. Arguments are held weakly, so a cached plan never
keeps memory alive.
"""
from __future__ import annotations

import weakref

from .execute import execute
from .partition import Partition
from .prepared_launch import prepare
from .tensor import Tensor
from .value_keys import value_key

_OBJECTS = (Tensor, Partition)


class LaunchPlan:
    __slots__ = ("args", "kwargs", "grid", "backend", "compiled", "bound", "partitions", "tensors", "launch")

    def __init__(self, args, kwargs, grid, backend, compiled, bound):
        self.args = tuple(_hold(a) for a in args)
        self.kwargs = {k: _hold(v) for k, v in kwargs.items()}
        self.grid = grid
        self.backend = backend
        self.compiled = compiled
        self.bound = bound
        self.partitions = tuple(weakref.ref(a) for a in (*args, *kwargs.values()) if isinstance(a, Partition))
        self.tensors = tuple(weakref.ref(a) for a in (*args, *kwargs.values()) if isinstance(a, Tensor))
        self.launch = self._first_repeat   # prepared on the first repeat: one-off launches pay nothing

    def _first_repeat(self):
        compiled, bound = self.compiled, self.bound
        prepared = prepare(compiled, bound)
        self.launch = prepared if prepared is not None else (lambda: execute(compiled, bound))
        return self.launch()

    def matches(self, args, kwargs, grid, backend) -> bool:
        if backend != self.backend or grid != self.grid or len(args) != len(self.args) \
                or len(kwargs) != len(self.kwargs):
            return False
        for a, held in zip(args, self.args):
            if type(held) is weakref.ref:       # a tensor or partition: `_same`'s test, inline
                if held() is not a:
                    return False
            elif not _same(a, held):
                return False
        for k, v in kwargs.items():
            if k not in self.kwargs or not _same(v, self.kwargs[k]):
                return False
        for p in self.partitions:
            p = p()
            if not p._live or p.torch_touched():
                return False
        for t in self.tensors:
            t = t()
            if t._lent_to() is not None or t._handed_at is not None:
                return False
        return True


def _hold(a):
    return weakref.ref(a) if isinstance(a, _OBJECTS) else a


def _same(a, held) -> bool:
    if isinstance(held, weakref.ref):
        return held() is a
    # Equal, and for anything but an int (the common case) equal as a kernel sees it: -0.0 is not 0.0.
    return type(a) is type(held) and a == held and (type(a) is int or value_key(a) == value_key(held))
