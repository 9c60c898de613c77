"""What a backend provides, and what it hands the runtime for one launch.

A backend compiles a specialization (the IR of one set of compile-time facts, with its
bounds masks) into code, and prepares a launch of that code as a `Launch` handle. It runs
kernels and nothing else: the runtime, one layer up, orders the launch after conflicting
work (S9/S10), starts it, marks what it wrote (S14), registers it with a capture (S12) and
wraps it in the `Future` the caller gets. So a backend imports nothing of the runtime; the
objects it is given (a bound launch, its tensors) it reads, it never updates their state.
"""
from __future__ import annotations

from typing import Protocol


class Launch(Protocol):
    """One launch of compiled code, prepared from a bound launch but not yet started."""
    device: object        # the torch device of the launch's memory, where S16's counters live (None: takes none)
    synchronous: bool     # True: the work is finished when `start` returns (nothing to order on a stream)
    tickets: int          # S16 ticket counters the launch takes (0: none); the runtime supplies them
    pointer_writes: dict  # after `start`: param name -> per-element "written" flags of unsafe pointer stores

    def start(self, counters) -> None:
        """Run (or enqueue, on the current stream) the launch; `counters`: the torch tensor of
        `tickets` counters, or None."""

    def direct(self, counters):
        """`(start, args)` for repeating this very launch with `start(raw_stream, args)`, or None
        where the backend has no such fast path (the launch fast path, runtime/prepared_launch)."""

    def relauncher(self):
        """`(start, values)` for launches of this launch's layout with other memory (the same
        extents, strides, scalars, grid and alignment class, so the same compiled code):
        `start(raw_stream, values(bound, tensors))` starts one; None where the backend has
        no such path (runtime/prepared_launch.LayoutLauncher). Asked of asynchronous launches only."""


class Compiled(Protocol):
    """A specialization compiled for one backend (cached by the runtime per code key)."""
    kernel: object
    spec: object          # the IR and its bounds analysis it was compiled from
    written: frozenset    # outputs every launch writes completely (S14)

    def launch(self, bound) -> Launch:
        """Prepare a launch with these bound arguments (refusing what this backend cannot run)."""


class Backend(Protocol):
    name: str

    def compile(self, kernel, spec, masks, wide: bool, bound, schedule=None) -> Compiled:
        """Code for one specialization: its bounds masks (S11), 32/64-bit offsets, schedule hints."""
