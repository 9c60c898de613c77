"""S14 for an unsafe kernel's writes at computed indices on the GPU: per-target write masks.

On the CPU the executor knows which elements an unsafe write reached; on the GPU the kernel
records them: each target written at computed indices gets a byte per element (allocated per
launch plan and target memory: a launch into other memory gets a new mask, LaunchPlan.own_masks;
passed after the error flag), and a write that lands sets its byte (lower_numba.py's `__stw*`).
Before a launch, the mask of each target not yet wholly written is cleared on the launch's
stream; when the launch is synced, the elements whose byte is set count as written. A byte set
by another launch with the same mask wrote the same memory, so what is marked was always
written; what a launch wrote but nobody synced stays unmarked (a later read of it is refused,
as for any tensor not known to be written).
"""
from __future__ import annotations


def clear(masks: dict, targets: dict) -> list:
    """On the current stream, clear the mask of each target not yet wholly written (`targets`:
    name -> (torch view, its storage state)). Returns the (mask, state, view) to mark at sync."""
    marks = []
    for name, mask in masks.items():
        view, state = targets[name]
        if state.init_mask is not None:
            mask.zero_()
            marks.append((mask, state, view))
    return marks


def mark(marks) -> None:
    """The launch is done: the elements its unsafe writes reached are written (S14)."""
    for mask, state, view in marks:
        state.mark_elements_written(view, mask.bool())
