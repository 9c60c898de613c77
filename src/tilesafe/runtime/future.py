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

import collections

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
    """When a launch (or graph replay) finishes; holds its memory alive until then (S9), and
    `HOLDING` lets go of it once known done, even if nobody asks.

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
        if keep:
            HOLDING.add(self)

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


class Holding:
    """The completions that still hold their launch's memory, oldest first; released once
    known done.

    A completion nobody waits for or polls sits in its tensors' own pending registries
    (storage_state), which are pruned only as those tensors are used again; and those
    registries live as long as the memory (memory_map), which the completion holds. So memory
    used only by launches whose results nobody reads stayed allocated for good. Each
    completion that holds memory also registers here, and every so often a sweep releases
    what is known done:
    - a completion waited for, or polled done;
    - every completion issued before it on the same stream (a stream runs its work in order).
    To learn that, a sweep records the event of the newest completion of each stream (lazily,
    as any waiter would) and polls the completions that have one, newest first: so each sweep
    learns at least what the GPU had finished by the previous one. Nothing is released before
    the GPU is done with it (S9). A sweep runs when the count reaches `limit`, or half as many
    again as the last sweep left held (the GPU running far behind): one pass over what is held
    and one event per stream each time. At most about `limit` finished launches keep their
    memory until the next launch.
    """

    def __init__(self, limit: int = 32):
        self.limit = limit
        self._held: collections.deque = collections.deque()
        self._next = limit              # sweep when this many are held

    def __len__(self) -> int:
        return len(self._held)

    def add(self, completion: "Completion") -> None:
        """Called by every launch and replay, under the runtime lock (host_lock), like the rest
        of the pending-work bookkeeping: no lock of its own on the launch path."""
        held = self._held
        held.append(completion)
        if len(held) >= self._next and graph_var.get() is None:   # never poll while capturing
            self._sweep()

    def _sweep(self) -> None:
        newest, finished, kept = {}, set(), []
        for c in reversed(self._held):  # newest first: a done one ends its stream's done prefix
            key = (getattr(c.stream_obj, "device_index", None), c.stream)   # handles repeat across devices
            if key in finished or c._done or (c.event is not None and c.event.query()):
                finished.add(key)
                c._done, c._keep = True, ()          # _finish, inlined: this runs for every launch
            else:
                if key not in newest:
                    newest[key] = c
                kept.append(c)
        for c in newest.values():
            if c.event is None:
                c.ready_event()         # recorded now (lazily, as any waiter's would be): polled next time
        kept.reverse()
        self._held = collections.deque(kept)
        self._next = max(self.limit, len(kept) * 3 // 2)


    def release_synchronized(self) -> None:
        """Release, without polling, every completion issued before its device's last full
        synchronisation (`device_synchronized`): the GPU has finished it."""
        kept = collections.deque()
        for c in self._held:
            device = getattr(c.stream_obj, "device_index", None)
            if c._done or (device is not None and c._epoch < _synced.get(device, 0)):
                c._done, c._keep = True, ()
            else:
                kept.append(c)
        self._held = kept
        self._next = max(self.limit, len(kept) * 3 // 2)


HOLDING = Holding()
DONE = Completion()


def synchronize_and_release(device_index: int) -> None:
    """Wait for all work on CUDA device `device_index`, then let go at once of the memory held
    by every launch and replay issued on it before. HOLDING otherwise sweeps only as later
    launches register, so the memory of an object's last launches (an engine's weights,
    through its last graph replays) stayed allocated after the object was dropped, until some
    32 more launches. Under the runtime lock, so no launch slips in between the wait and the
    release; not inside a capture (it waits for the GPU: S12)."""
    import torch

    from .host_lock import LOCK
    refuse_poll_in_capture("releasing finished launches' memory")
    with LOCK:
        torch.cuda.synchronize(device_index)
        device_synchronized(device_index)
        HOLDING.release_synchronized()


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
