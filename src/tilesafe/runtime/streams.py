"""`with ts.stream():` — launches inside run on another CUDA stream; S10 keeps them ordered."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def stream(s=None):
    """Run the launches inside on stream `s` (a new torch.cuda.Stream by default).

    On a machine without CUDA this is a no-op: launches are synchronous there.
    """
    import torch
    if not torch.cuda.is_available():
        yield None
        return
    s = s if s is not None else torch.cuda.Stream()
    with torch.cuda.stream(s):
        yield s

