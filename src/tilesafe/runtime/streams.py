"""`with ts.stream():` — launches inside run on another CUDA stream; S10 keeps them ordered."""
from __future__ import annotations

import contextlib

from ..errors import LaunchError, caller_loc
from ..settings import graph_var


def stream(s=None) -> contextlib.AbstractContextManager:
    """Run the launches inside on stream `s` (a new torch.cuda.Stream by default).

    On a machine without CUDA this is a no-op: launches are synchronous there. Inside
    `ts.graph()` it is refused (S12): a launch on another stream would not be captured —
    it would run once now, and the graph's replays would leave it out.
    """
    if graph_var.get() is not None:
        raise LaunchError("`with ts.stream():` is not allowed while capturing ts.graph(): its launches would run "
                          "once now and never at g.replay()",
                          loc=caller_loc(),
                          help="capture the launches on the capture's own stream, or run the other stream's "
                               "work outside the `with ts.graph()` block")
    return _on_stream(s)


@contextlib.contextmanager
def _on_stream(s):
    import torch
    if not torch.cuda.is_available():
        yield None
        return
    s = s if s is not None else torch.cuda.Stream()
    with torch.cuda.stream(s):
        yield s
