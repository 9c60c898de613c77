"""Running a specialization on the reference backend: NumPy views in, interpreter, results."""
from __future__ import annotations

import numpy as np
import torch

from ...lang.annotations import OUTPUTS, PTR
from ...lang.coverage import definitely_written
from ...settings import SETTINGS
from ...runtime.future import Future
from ...runtime.safety import mark_written
from . import interpreter
from .sanitizer import Sanitizer

DEFAULT_PERSISTENT_GRID = 3   # small, so every persistent loop runs more than one tile per block


class ReferenceCompiled:
    def __init__(self, kernel, spec, masks):
        self.kernel = kernel
        self.spec = spec
        self.masks = masks
        self.written = definitely_written(spec.fn)

    def run(self, bound) -> Future:
        k = self.kernel
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
            san = Sanitizer(k.name, grid, self.masks, init)
        interpreter.run(self.spec.fn, tensors, bound.scalars, grid, san)
        for device_t, host in copies:
            device_t.copy_(host)
        mark_written(bound, self.written)
        if san is not None and k.unsafe:   # safe kernels initialise by coverage alone, sanitized or not
            _mark_pointer_writes(bound, san, k)
        outputs = tuple(bound.tensors[n].obj for n in k.outputs)
        return Future(outputs)


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


def _mark_pointer_writes(bound, san: Sanitizer, kernel) -> None:
    """What an unsafe launch wrote through pointers counts as initialised (S14)."""
    for name, writer in san.writer.items():
        if kernel.param(name).kind != PTR:
            continue
        t = bound.tensors[name].tensor
        view = t._torch()
        flags = torch.from_numpy(writer >= 0).reshape(view.shape)
        t._state.mark_elements_written(view, flags)


class ReferenceBackend:
    @staticmethod
    def compile(kernel, spec, masks, wide, bound, schedule=None) -> ReferenceCompiled:
        return ReferenceCompiled(kernel, spec, masks)

