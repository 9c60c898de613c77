"""The result of a launch: returned at once; `sync()` waits and gives the outputs back.

Two objects, because they live differently: a `Completion` (the launch's CUDA event, its
stream, and the memory it uses) is what the pending-access registry holds until the GPU is
done; a `Future` adds the outputs and belongs to the caller. Dropping a future therefore
drops the partitions it returns, and their lending ends, while the memory stays alive
until the work finishes.

Inside `ts.graph()` nothing here may poll or wait on an event: CUDA forbids it while a
stream captures, and doing it anyway invalidates the capture with a raw torch error. The
capture synchronises its device on entry (`device_synchronized`), so every launch issued
before it is known to be done without asking CUDA; anything else that would poll is an
`OwnershipError` raised before any CUDA call (S12).
"""
from __future__ import annotations

from ..errors import OwnershipError, caller_loc
from ..settings import graph_var

# Device index -> the epoch of that device's last full synchronisation. A completion made
# before it (a smaller epoch) is finished without polling. A process-wide fact about the
# devices, so it lives at module level, updated under the runtime lock.
_synced: dict[int, int] = {}
_epoch = [0]


def device_synchronized(device_index: int) -> None:
    """Record that every launch issued so far on `device_index` has finished."""
    _epoch[0] += 1
    _synced[device_index] = _epoch[0]


class Completion:
    """When a launch (or graph replay) finishes; holds its memory alive until then (S9).

    The CUDA event is recorded lazily, the first time someone needs to wait or poll: an
    event recorded later on the same stream completes after the launch, so waiting on it
    is correct (conservative), and launches nobody waits for cost no event at all.
    """
    __slots__ = ("event", "stream", "stream_obj", "_keep", "_done", "_epoch")

    def __init__(self, event=None, stream=None, keep=(), stream_obj=None):
        self.event = event            # a CUDA event, or None until one is needed
        self.stream = stream          # the raw CUDA stream handle (an int); None: already done
        self.stream_obj = stream_obj  # the torch stream the launch ran on
        self._keep = keep
        self._done = event is None and stream is None
        self._epoch = _epoch[0]

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
        if not self._known_done() and self.ready_event().query():
            self._finish()
        return self._done

    def wait(self) -> None:
        if not self._known_done():
            self.ready_event().synchronize()
            self._finish()

    def _known_done(self) -> bool:
        """Done without asking CUDA; inside a capture, refuse what would have to ask."""
        if self._done:
            return True
        device = getattr(self.stream_obj, "device_index", None)
        if device is not None and self._epoch < _synced.get(device, 0):
            self._finish()            # its device was synchronised after it was issued
            return True
        refuse_poll_in_capture("waiting for a launch issued before the capture")
        return False

    def _finish(self) -> None:
        self._done = True
        self._keep = ()


DONE = Completion()


def refuse_poll_in_capture(what: str) -> None:
    """S12: a host poll or wait is an error while capturing, raised before any CUDA call."""
    if graph_var.get() is not None:
        raise OwnershipError(f"{what} waits for the GPU, which is not allowed while capturing ts.graph()",
                             loc=caller_loc(),
                             help="wait before the `with ts.graph()` block, or after it (call g.replay(), "
                                  "then sync the future it returns)")


class Future:
    """A launch in flight. `sync()` waits and returns the outputs (the partitions passed in)."""
    __slots__ = ("_outputs", "completion")

    def __init__(self, outputs: tuple, completion: Completion = DONE):
        self._outputs = outputs
        self.completion = completion

    def done(self) -> bool:
        """True once the GPU finished (polls, never blocks; refused inside ts.graph())."""
        refuse_poll_in_capture("fut.done()")
        return self.completion.done()

    def wait(self) -> None:
        refuse_poll_in_capture("fut.wait()")
        self.completion.wait()

    def sync(self):
        """Wait for the launch; return its outputs (one partition, or a tuple in parameter order)."""
        refuse_poll_in_capture("fut.sync()")
        self.completion.wait()
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
        # Never raises (debuggers call repr everywhere): inside a capture it does not poll.
        try:
            done = self.completion.done()
        except OwnershipError:
            done = False
        return f"Future({'done' if done else 'pending'})"
