"""The result of a launch: returned at once; `sync()` waits and gives the outputs back."""
from __future__ import annotations


class Future:
    """A launch in flight. `sync()` waits and returns the outputs (the partitions passed in)."""
    __slots__ = ("_outputs", "_event", "_done")

    def __init__(self, outputs: tuple, event=None):
        self._outputs = outputs
        self._event = event            # a CUDA event, or None when the work already ran
        self._done = event is None

    def done(self) -> bool:
        if not self._done and self._event.query():
            self._done = True
        return self._done

    def wait(self) -> None:
        if not self._done:
            self._event.synchronize()
            self._done = True

    def sync(self):
        """Wait for the launch; return its outputs (one partition, or a tuple in parameter order)."""
        self.wait()
        return self.results()

    def results(self):
        """The outputs without waiting; later uses of them are ordered after this launch."""
        return self._outputs[0] if len(self._outputs) == 1 else self._outputs

    def __await__(self):
        import asyncio
        while not self.done():
            yield from asyncio.sleep(0.0005).__await__()
        return self.results()

    def __repr__(self) -> str:
        return f"Future({'done' if self.done() else 'pending'})"
