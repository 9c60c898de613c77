"""Running a specialization on the reference backend: NumPy views in, interpreter, results.

A launch runs when the runtime starts it and is finished when `start` returns
(`synchronous`): memory on a GPU is copied to the host and back around the interpreter.
"""
from __future__ import annotations

import numpy as np
import torch

from ...lang.annotations import OUTPUTS, PTR
from ...settings import SETTINGS
from . import interpreter
from .sanitizer import Sanitizer

DEFAULT_PERSISTENT_GRID = 3   # small, so every persistent loop runs more than one tile per block


class ReferenceBackend:
    name = "reference"

    @staticmethod
    def compile(kernel, spec, masks, wide, bound, schedule=None) -> "ReferenceCompiled":
        return ReferenceCompiled(kernel, spec, masks)


class ReferenceCompiled:
    def __init__(self, kernel, spec, masks):
        self.kernel = kernel
        self.spec = spec
        self.masks = masks
        self.written = spec.written

    def launch(self, bound) -> "ReferenceLaunch":
        return ReferenceLaunch(self, bound)


class ReferenceLaunch:
    """One interpreted launch (see backends/protocol.Launch)."""
    synchronous = True
    tickets = 0          # the interpreter runs blocks one after another: no ticket counters
    device = None        # so it needs no device to hold them

    def __init__(self, compiled: ReferenceCompiled, bound):
        self.compiled, self.bound = compiled, bound
        self.pointer_writes: dict = {}

    def start(self, counters=None) -> None:
        k, bound = self.compiled.kernel, self.bound
        grid = bound.grid or (DEFAULT_PERSISTENT_GRID,)
        tensors, copies = {}, []
        for name, f in bound.tensors.items():
            t = f.tensor._torch()
            host = t if t.device.type == "cpu" else t.to("cpu")
            if host is not t and k.param(name).kind in (*OUTPUTS, PTR):
                copies.append((t, host))
            tensors[name] = _numpy_view(host)
        sanitize = k.unsafe or (k.sanitize if k.sanitize is not None else SETTINGS.sanitize)
        san = None
        if sanitize:
            init = {n: _init_flags(f) for n, f in bound.tensors.items() if k.param(n).kind == PTR}
            san = Sanitizer(k.name, grid, self.compiled.masks, init)
        interpreter.run(self.compiled.spec.fn, tensors, bound.scalars, grid, san)
        for device_t, host in copies:
            # The kernel's write, as a GPU kernel's would be: no torch version bump, else the
            # S13 check would take it for a torch write to lent memory.
            with torch.autograd._unsafe_preserve_version_counter(device_t):
                device_t.copy_(host)
        if san is not None and k.unsafe:   # safe kernels initialise by coverage alone, sanitized or not
            # What an unsafe launch wrote through pointers counts as initialised (S14; the runtime marks it).
            self.pointer_writes = {name: writer >= 0 for name, writer in san.writer.items()
                                   if k.param(name).kind == PTR}

    def direct(self, counters=None):
        return None      # nothing to skip: the interpreter's cost is the run itself


def _numpy_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy array sharing `t`'s memory (bf16/fp8 through a same-size integer view)."""
    from ... import dtypes
    d = dtypes.from_torch(t.dtype)
    if d.name in ("bf16",):
        return t.view(torch.int16).numpy().view(d.np)
    if d.name.startswith("f8"):
        return t.view(torch.uint8).numpy().view(d.np)
    return t.numpy()


def _init_flags(f):
    """Per element (flat, as the pointer sees it): was it written before this launch?"""
    t = f.tensor
    if t._state.init_mask is None:
        return None
    return t._state.written_elements(t._torch()).reshape(-1).numpy()
