"""`Mailbox`: outputs handed from the engine thread to one asyncio event loop, one wake-up a
step instead of one per output.

`loop.call_soon_threadsafe` writes to the loop's self-pipe on every call: a system call of
tens of µs on a busy host, once per request per step — at 128 running requests most of the
engine thread's time between GPU steps. A mailbox queues each output with its request's
queue; inside `one_wake_up()` (the engine core's emit of a step) each loop is woken once at
the end, elsewhere at once. The loop then delivers everything queued since, in order. A
loop that has closed refuses the post (RuntimeError), as call_soon_threadsafe would, so the
engine aborts that request.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from collections import deque

_batch = threading.local()        # .boxes: the mailboxes posted to inside one_wake_up() on this thread


class Mailbox:
    def __init__(self, loop):
        self._loop = weakref.ref(loop)     # not the loop itself: _boxes' value would keep its key alive
        self._items: deque = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def post(self, queue, out) -> None:
        """On the engine thread: `queue.put_nowait(out)` on the loop, soon."""
        loop = self._loop()
        if loop is None or loop.is_closed():
            raise RuntimeError("Event loop is closed")
        with self._lock:
            self._items.append((queue, out))
        pending = getattr(_batch, "boxes", None)
        if pending is not None:
            pending[self] = None
        else:
            self.wake()

    def wake(self) -> None:
        """Have the loop deliver what is queued (one call_soon_threadsafe while none is pending)."""
        with self._lock:
            if self._scheduled or not self._items:
                return
            self._scheduled = True
        try:
            loop = self._loop()
            if loop is None:
                raise RuntimeError("Event loop is gone")
            loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:             # closed (or gone) since the post: its requests' next post refuses
            with self._lock:
                self._scheduled = False

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for queue, out in items:
            queue.put_nowait(out)


@contextlib.contextmanager
def one_wake_up():
    """Posts made inside wake each loop once, when the block ends."""
    outer = getattr(_batch, "boxes", None)
    _batch.boxes = pending = {} if outer is None else outer
    try:
        yield
    finally:
        if outer is None:
            _batch.boxes = None
            for box in pending:
                box.wake()


_boxes: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_boxes_lock = threading.Lock()


def mailbox_for(loop) -> Mailbox:
    """The loop's one mailbox (made on first use; it goes with the loop)."""
    with _boxes_lock:
        box = _boxes.get(loop)
        if box is None:
            box = _boxes[loop] = Mailbox(loop)
        return box
