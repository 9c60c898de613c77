"""The result of a launch: returned at once; `sync()` waits and gives the outputs back."""
from __future__ import annotations


class Future:
    """A launch in flight. `sync()` waits and returns the outputs (the partitions passed in).

    While pending it holds the launch's tensors, so their memory outlives the GPU work (S9).
    """
    __slots__ = ("_outputs", "_event", "_stream", "_keep", "_done")

    def __init__(self, outputs: tuple, event=None, stream=None, keep=()):
        self._outputs = outputs
        self._event = event            # a CUDA event, or None when the work already ran
        self._stream = stream
        self._keep = keep
        self._done = event is None

    def done(self) -> bool:
        """True once the GPU finished this launch (polls, never blocks)."""
        if not self._done and self._event.query():
            self._finish()
        return self._done

    def wait(self) -> None:
        if not self._done:
            self._event.synchronize()
            self._finish()

    def _finish(self) -> None:
        self._done = True
        self._keep = ()

    def sync(self):
        """Wait for the launch; return its outputs (one partition, or a tuple in parameter order)."""
        from ..settings import graph_var
        if graph_var.get() is not None:
            from ..errors import OwnershipError
            raise OwnershipError("fut.sync() waits for the GPU, which is not allowed while capturing ts.graph()",
                                 help="sync after the `with ts.graph()` block, or call g.replay() and sync then")
        self.wait()
        return self.results()

    def results(self):
        """The outputs without waiting; later uses of them are ordered after this launch."""
        return self._outputs[0] if len(self._outputs) == 1 else self._outputs

    def __await__(self):
        import asyncio
        while not self.done():
            yield from asyncio.sleep(0.0002).__await__()
        return self.results()

    def __repr__(self) -> str:
        return f"Future({'done' if self.done() else 'pending'})"
