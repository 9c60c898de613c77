"""A library call plan's fast form (kernels/call_hits.py) against the plan's full redo, on any
machine, with the device work stubbed out (profile_host_path.stub_device_work).

For each call: host µs per call (the fastest of several rounds of process time, fresh torch
views every call as host_overhead.py makes them), function calls per call (counted by a
profile hook over a few calls: all, and the Python functions among them) and Python bytecodes
per call (a trace hook's opcode events: steadier than µs on a shared machine), once with call
plans' fast form and once without it (`CallHit.of` returning None: every hit redoes the
plan, the path before the fast form).
Also a user kernel launched with new tilesafe tensors from torch every call.

    cd benchmarks && PYTHONPATH=../src python host_path_hits.py                # reference backend
    cd benchmarks && PYTHONPATH=../src python host_path_hits.py --backend triton-interpreter
    cd benchmarks && PYTHONPATH=../src python host_path_hits.py --gpu-stand-in   # the GPU form's host work

`--gpu-stand-in` times the fast form's GPU launches on the CPU: the current CUDA stream and
Triton's launcher are stand-ins (a launch starts nothing), so what is timed is the host work
of a GPU hit — borrowing, checks, the argument tuple, ordering and pending registration. The
user kernel's launches of a seen layout then take their GPU form too (a LayoutLauncher).
`--only user` times the user kernel alone.
"""
import argparse
import sys

import torch

import tilesafe as ts
from host_overhead import Fresh, cases, sizes
from host_path_calls import us_per_call
from profile_host_path import add3, stub_device_work
from tilesafe.kernels import call_hits

CASES = ("linear M=1", "add", "rms_norm", "rope", "embedding", "argmax", "decode_attention")


def us_and_calls(fn, tensors: dict, calls: int, repeats: int) -> tuple[float, float, float, float]:
    """(µs per call, function calls per call, of them Python functions, Python bytecodes per
    call) — the stand-ins' own functions (this script's) left out of the Python counts."""
    best = us_per_call(fn, tensors, calls, repeats, warmup=30)
    fresh = Fresh(tensors, 40)                      # new views of the same memory for the counts
    counted = [0, 0]

    def hook(frame, event, arg):
        if event == "c_call":
            counted[0] += 1
        elif event == "call":
            counted[0] += 1
            if frame.f_code.co_filename != __file__:
                counted[1] += 1
    views = [fresh.next() for _ in range(20)]
    sys.setprofile(hook)
    for v in views:
        fn(v)
    sys.setprofile(None)
    ops = [0]                                       # Python bytecodes executed (a steadier measure than µs)

    def trace(frame, event, arg):
        if frame.f_code.co_filename == __file__:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            ops[0] += 1
        return trace
    views = [fresh.next() for _ in range(20)]
    sys.settrace(trace)
    for v in views:
        fn(v)
    sys.settrace(None)
    return best, counted[0] / 20, counted[1] / 20, ops[0] / 20


def user_kernel_case() -> tuple:
    x, y, z = torch.rand(4096), torch.rand(4096), torch.empty(4096)

    def call(t):
        p = ts.from_torch(t["z"]).partition((1024,))
        add3(p, ts.from_torch(t["x"]), ts.from_torch(t["y"]))
        p.unpartition()
    return call, dict(x=x, y=y, z=z)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--gpu-stand-in", action="store_true", help="time the GPU form with stand-ins for CUDA")
    ap.add_argument("--only", default=None, help="a substring of the case names to time ('user': the user kernel)")
    a = ap.parse_args()
    stub_device_work()
    if a.gpu_stand_in:
        gpu_stand_in()
    fast_form = call_hits.CallHit.of
    rows = []
    with ts.backend(a.backend), torch.no_grad():
        for c in cases(sizes(True), "cpu", torch.float32):
            if c.name not in CASES or (a.only is not None and a.only not in c.name):
                continue
            for form, fn in (("eager", c.library), ("out=", c.library_out)):
                measured = []
                for on in (False, True):
                    call_hits.CallHit.of = fast_form if on else (lambda *args: None)
                    forget_plans()        # new plans, made with the fast form on or off
                    measured.append(us_and_calls(fn, c.tensors, a.calls, a.repeats))
                rows.append((f"{c.name} ({form})", *measured))
        call_hits.CallHit.of = fast_form
        fn, tensors = user_kernel_case()
        measured = us_and_calls(fn, tensors, a.calls, a.repeats)
        rows.append(("user kernel, fresh tensors", measured, measured))
    print(f"{'call':32s} {'before us':>10s} {'calls':>7s} {'(py)':>5s} {'ops':>6s} {'after us':>10s} {'calls':>7s} "
          f"{'(py)':>5s} {'ops':>6s}")
    for name, (b_us, b_n, b_py, b_ops), (f_us, f_n, f_py, f_ops) in rows:
        print(f"{name:32s} {b_us:10.1f} {b_n:7.0f} {b_py:5.0f} {b_ops:6.0f} {f_us:10.1f} {f_n:7.0f} {f_py:5.0f} "
              f"{f_ops:6.0f}", flush=True)


def gpu_stand_in() -> None:
    """Fast-form launches take their GPU form with stand-ins for the CUDA stream and Triton."""
    from tilesafe.runtime import future, launch_cache, planned_launch, prepared_launch

    class Stream:
        device_index = None

    def prepare(self, bound):
        self.start = lambda stream, args: None
        self.values = (0,) * len(self.access)
        self.pointers = tuple((k, k) for k in range(len(self.access)))
        self.descriptors, self.device_index = (), 0
        return planned_launch._GPU
    class Device:
        index = 0

    def layout_launcher(compiled, bound):   # a user kernel's launches of a seen layout (launch_cache.run)
        names = tuple(bound.tensors)
        # A list, as Triton's fill builds it (a tuple from a generator costs garbage collections)
        fill = lambda bound, views: tuple([views[n].data_ptr() for n in names])   # noqa: E731
        return prepared_launch.LayoutLauncher(compiled, bound, lambda stream, args: None, fill, Device())
    launch_cache.prepare_layout = layout_launcher
    torch._C._cuda_getCurrentRawStream = lambda index: 7
    torch.cuda.current_stream = lambda device=None: Stream()
    future.HOLDING.add = lambda completion: completion._finish()   # stand-in work is done at once: let go of its memory
    future.Completion._known_done = lambda self: True  # and it is done at once
    planned_launch.PlannedLaunch._prepare = prepare


def forget_plans() -> None:
    """Clear every library function's plans."""
    from tilesafe.kernels import call_plans
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("tilesafe.kernels"):
            for v in list(vars(mod).values()):
                p = v if isinstance(v, call_plans.PlanCache) else getattr(v, "plans", None)
                if isinstance(p, call_plans.PlanCache):
                    p.plans.clear()


if __name__ == "__main__":
    main()
