"""The result of a launch: returned at once; `sync()` waits and gives the outputs back.

Two objects, because they live differently: a `Completion` (the launch's CUDA event, its
stream, and the memory it uses) is what the pending-access registry holds until the GPU is
done; a `Future` adds the outputs and belongs to the caller. Dropping a future therefore
drops the partitions it returns, and their lending ends, while the memory stays alive
until the work finishes.
"""
from __future__ import annotations


class Completion:
    """When a launch (or graph replay) finishes; holds its memory alive until then (S9).

    The CUDA event is recorded lazily, the first time someone needs to wait or poll: an
    event recorded later on the same stream completes after the launch, so waiting on it
    is correct (conservative), and launches nobody waits for cost no event at all.
    """
    __slots__ = ("event", "stream", "stream_obj", "_keep", "_done")

    def __init__(self, event=None, stream=None, keep=(), stream_obj=None):
        self.event = event            # a CUDA event, or None until one is needed
        self.stream = stream          # the raw CUDA stream handle (an int); None: already done
        self.stream_obj = stream_obj  # the torch stream the launch ran on
        self._keep = keep
        self._done = event is None and stream is None

    def ready_event(self):
        """The event to wait on, recorded now on the launch's stream if there is none yet."""
        if self.event is None:
            import torch
            event = torch.cuda.Event()
            event.record(self.stream_obj)
            self.event = event
        return self.event

    def done(self) -> bool:
        """True once the GPU finished (polls, never blocks)."""
        if not self._done and self.ready_event().query():
            self._finish()
        return self._done

    def wait(self) -> None:
        if not self._done:
            self.ready_event().synchronize()
            self._finish()

    def _finish(self) -> None:
        self._done = True
        self._keep = ()


DONE = Completion()


class Future:
    """A launch in flight. `sync()` waits and returns the outputs (the partitions passed in)."""
    __slots__ = ("_outputs", "completion")

    def __init__(self, outputs: tuple, completion: Completion = DONE):
        self._outputs = outputs
        self.completion = completion

    def done(self) -> bool:
        return self.completion.done()

    def wait(self) -> None:
        self.completion.wait()

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
        if not self._outputs:
            return None
        return self._outputs[0] if len(self._outputs) == 1 else self._outputs

    def __await__(self):
        import asyncio
        while not self.done():
            yield from asyncio.sleep(0.0002).__await__()
        return self.results()

    def __repr__(self) -> str:
        return f"Future({'done' if self.done() else 'pending'})"
