"""CUDA graphs (S12): capture launches once, replay them with almost no host cost.

Inside `with ts.graph() as g:` allocations and host synchronisation are refused (they
would be frozen into the graph or break the capture); library calls take `out=`. The graph
keeps every buffer a captured launch uses alive, and each `g.replay()` registers those
accesses as pending, so host reads and later launches are ordered after it (S9/S10).
Run each kernel once eagerly before capturing, so compilation happens outside the capture.
"""
from __future__ import annotations

import contextlib

from ..errors import LaunchError
from ..settings import graph_var
from .future import Completion, Future


class Graph:
    def __init__(self):
        import torch
        self._graph = torch.cuda.CUDAGraph()
        self._accesses: list = []      # (tensor, is_write)
        self._keep: list = []
        self._seen: set = set()

    def record(self, tensor, is_write: bool) -> None:
        """Called by a launch during capture: the replay reads/writes this tensor."""
        key = (tensor._byte_set(), is_write)
        if key not in self._seen:     # 22 layers reuse a few buffers: register each once
            self._seen.add(key)
            self._accesses.append((tensor, is_write))
            self._keep.append(tensor._torch())

    def replay(self) -> Future:
        """Run the captured work again on the current stream; returns a Future."""
        import torch
        stream = torch.cuda.current_stream()
        for t, is_write in self._accesses:
            t._state.order_device(t._byte_set(), is_write, stream.cuda_stream)
        self._graph.replay()
        event = torch.cuda.Event()
        event.record(stream)
        done = Completion(event, stream.cuda_stream, tuple(self._keep))
        for t, is_write in self._accesses:
            t._state.record(t._byte_set(), is_write, done)
        return Future((), done)


@contextlib.contextmanager
def graph():
    """Capture the launches inside into a CUDA graph: `with ts.graph() as g: ...; g.replay()`."""
    import torch
    if not torch.cuda.is_available():
        raise LaunchError("ts.graph() needs a CUDA GPU", help="run eagerly on this machine")
    if graph_var.get() is not None:
        raise LaunchError("ts.graph() captures cannot be nested")
    g = Graph()
    torch.cuda.synchronize()
    token = graph_var.set(g)
    try:
        with torch.cuda.graph(g._graph):
            yield g
    finally:
        graph_var.reset(token)


def refuse_in_capture(what: str) -> None:
    """S12: allocations and host syncs are errors while a graph is being captured."""
    if graph_var.get() is not None:
        from ..errors import OwnershipError
        raise OwnershipError(f"{what} is not allowed while capturing ts.graph()",
                             help="allocate buffers before the capture and pass them in (library "
                                  "functions take out=); read results after g.replay()")
