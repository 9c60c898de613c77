"""One lock around tilesafe's host-side bookkeeping, so Python threads may launch at once.

What a launch checks and records — lending (S8), pending accesses (S9/S10), written bytes
(S14) — is read and then updated; two threads doing that at once could both pass a check
that only one of them should (two partitions of the same bytes), or lose an update. Each
public step that reads or changes that state (a launch, a host read or write, lending and
giving back, borrowing from torch, a graph capture or replay) holds this lock for its
whole duration, so the steps of different threads happen one after the other, each one
checked against everything before it. GPU work still overlaps: only the host-side steps
are serialised. A host read that must wait for the GPU waits while holding the lock, so
that no other thread launches a writer of those bytes between the wait and the read.

It is re-entrant: a graph capture holds it across its body, and the launches inside take it again.
"""
from __future__ import annotations

import functools
import threading

LOCK = threading.RLock()


def serialized(method):
    """Run `method` holding the runtime's lock (the decorator for public host-side steps)."""
    @functools.wraps(method)
    def locked(*args, **kwargs):
        with LOCK:
            return method(*args, **kwargs)
    return locked
