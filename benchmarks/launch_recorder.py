"""The Triton launches a tilesafe call makes, recorded once and replayed as raw `kernel[grid](...)`.

`installed()` wraps the three places where tilesafe's Triton backend starts a kernel
(`adapter.launch`: the full path; `adapter.compiled_kernel` + `adapter.direct_launcher`: the
prepared fast path). Outside `recording()` the wrappers only check a flag (well under a
microsecond, paid by the tilesafe side only). A recorded launch keeps the JIT function, grid,
arguments (the call's own tensors, kept alive) and options, so `replay` pays exactly what a
hand-written Triton launch of the same compiled kernels pays: Triton's dispatcher.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tilesafe.backends.triton import adapter


@dataclass(frozen=True, slots=True)
class RawLaunch:
    fn: object              # the triton.JITFunction
    grid: tuple
    args: tuple
    options: dict
    interpret: bool


class Recorder:
    def __init__(self):
        self.active: list | None = None    # the launches of the call being recorded
        self.origin = {}                    # id(compiled kernel) -> RawLaunch that compiled it
        self.original_launch = adapter.launch

    @contextlib.contextmanager
    def installed(self):
        """The wrappers in place for the body of the `with` block (then the originals again)."""
        original_launch, original_compiled, original_direct = adapter.launch, adapter.compiled_kernel, \
            adapter.direct_launcher

        def launch(fn, grid, args, interpret, options=None):
            if self.active is not None:
                self.active.append(RawLaunch(fn, tuple(grid), tuple(args), dict(options or {}), interpret))
            return original_launch(fn, grid, args, interpret, options)

        def compiled_kernel(fn, grid, args, options):
            kernel = original_compiled(fn, grid, args, options)
            self.origin[id(kernel)] = RawLaunch(fn, tuple(grid), tuple(args), dict(options or {}), False)
            return kernel

        def direct_launcher(kernel, grid3):
            start, raw = original_direct(kernel, grid3), self.origin.get(id(kernel))

            def recorded(stream, args):
                if self.active is not None and raw is not None:
                    self.active.append(raw)
                start(stream, args)
            return recorded

        adapter.launch, adapter.compiled_kernel, adapter.direct_launcher = launch, compiled_kernel, direct_launcher
        try:
            yield self
        finally:
            adapter.launch, adapter.compiled_kernel, adapter.direct_launcher = \
                original_launch, original_compiled, original_direct

    @contextlib.contextmanager
    def recording(self):
        """`with rec.recording() as launches: call()`: the launches `call` made, in order."""
        self.active = launches = []
        try:
            yield launches
        finally:
            self.active = None

    def replayer(self, launches: list[RawLaunch]):
        """A zero-argument function that starts the same kernels through raw Triton."""
        if any(r.interpret for r in launches):       # the CPU smoke run: Triton's interpreter
            original = self.original_launch
            return lambda: [original(r.fn, r.grid, r.args, True, r.options) for r in launches]
        plan = [(r.fn, r.grid, r.args, r.options) for r in launches]

        def replay():
            for fn, grid, args, options in plan:
                fn[grid](*args, **options)
        return replay
