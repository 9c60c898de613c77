"""A SIMT launch inside `ts.graph()` (S12): recorded into the CUDA graph, replayed by `g.replay()`.

The launch goes to the capturing stream as an eager one goes to the current stream, and the
graph learns its accesses (replays are ordered and recorded by them, S9/S10) and the outputs
it will have written (S14, marked at the first replay; later captured launches may read them).
Two things cannot happen inside a capture, so they are refused with a way out:
- the first GPU launch of a layout, which compiles the kernel and allocates its error flag:
  launch it once eagerly with tensors of the same layout before capturing (the usual warm-up);
- a kernel with run-time checks (reads not proven in bounds, atomics, unsafe writes): its
  failed check sets a flag that `sync()` reads, but a replay has no sync of the launch, so a
  failure would go unseen. Prove the reads (`x.get(i, default)`) or launch it eagerly.
"""
from __future__ import annotations

from ..errors import LaunchError
from ..runtime.future import Future
from . import gpu_launch
from .binding import covered_targets
from .simt_future import SimtFuture


def launch_in_capture(kernel, plan, args, kwargs, capture):
    if kernel.has_checks:
        lines = sorted({kernel.src.loc(n).line for _, n in kernel.info.checked} |
                       {kernel.src.loc(n).line for n in kernel.info.atomics})
        where = f" (checked at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})" if lines else ""
        raise LaunchError(f"SIMT kernel `{kernel.name}` has run-time checks{where}, which ts.graph() cannot report: "
                          "a replay's failed check would go unseen",
                          help="prove its reads in bounds (x.get(i, default) reads with a default), or launch it "
                               "outside the `with ts.graph()` block")
    if plan is None or plan.compiled is None:
        raise LaunchError(f"SIMT kernel `{kernel.name}` has not been launched on the GPU with this layout "
                          "before the capture: its compile cannot happen inside ts.graph()",
                          help="launch it once eagerly with tensors of the same dtypes, shapes and strides "
                               "before `with ts.graph()`")
    import torch
    capture.admit(kernel.name, capture.backend)           # on the capture's stream
    bound = plan.rebind(kernel, args, kwargs, capture.is_written)     # S8, S13; S14 as the capture sees it
    capture.admit_arguments(kernel.name, bound)            # on the capture's device
    if plan.config is not None:
        plan.fill_pointers(bound)                          # the plan is keyed by layout: these tensors' addresses
        gpu_launch.launch(plan.compiled, plan.config, torch.cuda.current_stream().cuda_stream, plan.args)
    for name in covered_targets(kernel, bound):
        t = bound.tensors[name].tensor
        capture.defer_written(t._state, t._torch())
    for name, f in bound.tensors.items():
        capture.record(f.tensor, kernel.runtime_view.param(name).kind in ("mut", "ptr"))
    return SimtFuture(Future(plan.passed_outputs(args, kwargs)), kernel, None)
