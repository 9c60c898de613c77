"""The tail every GPU fast launch shares: order, start, mark, record.

Three launchers start Triton's compiled kernel without a tilesafe bound: a repeated launch
(prepared_launch.PreparedLaunch), a seen layout with new memory (prepared_launch.
LayoutLauncher) and a library call plan's launch (planned_launch.PlannedLaunch). After their
own checks each does the same four things, in this order, here:
  * S10: wait for conflicting pending work of other streams (a state whose pending work is
    all on this stream is ordered by the stream itself: nothing is looked for);
  * start the kernel;
  * S14: mark what it wrote (only where memory tracks initialisation: the caller says);
  * S9: register each access as pending, with a completion that holds the memory until
    the GPU is done.
"""
from __future__ import annotations

import torch

from .future import Completion
from .storage_state import record_launch, record_launch_source


def start_pending(start, stream: int, args: tuple, states, sets, writes, held: tuple, streams: dict,
                  device_index: int, mark=None) -> Completion:
    """Start `start(stream, args)` ordered after other streams' conflicting work on `states`
    (their accesses: byte sets `sets`, writes `writes`), call `mark()` if given, and register
    the accesses as pending until the launch is done; `held`: the tensors its completion keeps
    alive; `streams`: the launcher's raw stream -> torch stream cache."""
    k = 0
    for state in states:
        if state._pending and state.pending_stream != stream:   # S10: other streams' work
            state.order_device(sets[k], writes[k], stream)
        k += 1
    start(stream, args)
    if mark is not None:
        mark()
    stream_obj = streams.get(stream)
    if stream_obj is None:    # the current stream's torch object, looked up once per stream
        stream_obj = streams[stream] = torch.cuda.current_stream(device_index)
    done = Completion(None, stream, held, stream_obj)   # its event is made lazily
    record_launch(states, sets, writes, done, stream)
    return done


def start_pending_source(states: list, sets: str | list, writes: tuple, args: str, held: str, mark: str | None,
                         streams: str, device: str) -> list:
    """`start_pending` as lines of Python for a launcher that writes its steps out per layout
    (planned_unrolled.py), ending with the completion in `done`: `states`: the expressions of
    the states; `sets`, `args`, `held`, `mark` (None: no mark), `streams`, `device`: the
    expressions start_pending is passed (`sets` a name, indexed per state, or one expression
    per state); `writes`: the write flags (constants of the layout).
    Needs `torch`, `Completion` and record_launch_source's names in its namespace. The same
    steps in the same order."""
    lines = [f"stream = torch._C._cuda_getCurrentRawStream({device})"]
    set_of = sets if isinstance(sets, (list, tuple)) else [f"{sets}[{k}]" for k in range(len(states))]
    for state, is_write, byteset in zip(states, writes, set_of):
        lines += [f"if {state}._pending and {state}.pending_stream != stream:   # S10: other streams' work",
                  f"    {state}.order_device({byteset}, {bool(is_write)!r}, stream)"]
    lines.append(f"self.start(stream, {args})")
    if mark is not None:
        lines += [f"if {mark} is not None:",
                  f"    {mark}()"]
    lines += [f"stream_obj = {streams}.get(stream)",
              "if stream_obj is None:    # the current stream's torch object, looked up once per stream",
              f"    stream_obj = {streams}[stream] = torch.cuda.current_stream({device})",
              f"done = Completion(None, stream, {held}, stream_obj)"]
    return lines + record_launch_source(states, sets, writes, "done", "stream")
