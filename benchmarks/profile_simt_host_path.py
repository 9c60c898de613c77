"""Host cost of an eager SIMT launch on the GPU path, with the device work replaced by a no-op.

Runs on any machine (no GPU): the launch takes the GPU branch of simt/launch.py on CPU tensors,
with the compile, the error flag, the capability query, torch's current stream and events, and
the final driver launch (`cuLaunchKernel`) stubbed out in this script only. What is timed is tilesafe's host
path for a SIMT kernel: the layout key, the plan lookup, the per-launch checks (S7, S8, S13,
S14), the data pointers written into the plan's parameters, S9/S10's ordering bookkeeping and
the future. (On a GPU the real launch call, one `cuLaunchKernel`, comes on top: measure that with
`benchmarks/probes/eager_simt_host.py` or `benchmarks/simt_bench.py --host-only`.)

    PYTHONPATH=src python benchmarks/profile_simt_host_path.py            # µs per call
    PYTHONPATH=src python benchmarks/profile_simt_host_path.py --profile "fresh out"   # cProfile one case
"""
import argparse
import cProfile
import pstats
import types

import torch

import tilesafe as ts
from tilesafe.simt import gpu_launch
from tilesafe.simt import launch as simt_launch
from tilesafe.simt.examples import histogram, vector_add

from profile_host_path import us_per_call   # benchmarks/ is the script's directory


class _Event:
    def record(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass


def stub_device_work(kernels) -> None:
    """Make the device step free and let CPU tensors take the GPU path."""
    stream = types.SimpleNamespace(cuda_stream=7, device_index=0)
    simt_launch._is_gpu = lambda device: device is not None
    simt_launch._capability = lambda index: (9, 0)
    torch.cuda.current_device = lambda: 0
    torch.cuda.current_stream = lambda device=None: stream
    torch.cuda.Event = _Event
    gpu_launch.current_device = lambda: 0
    gpu_launch.current_stream = lambda index: stream.cuda_stream
    gpu_launch.config = lambda grid, block, shared=0: (grid, block)
    gpu_launch.launch = lambda kernel, config, stream, args: None
    for k in kernels:
        flag = torch.zeros(1, dtype=torch.int32)
        k.gpu_compiled = lambda bound, index: "compiled"
        k.error_flag = lambda index, flag=flag: flag


def cases() -> dict:
    """name -> a zero-argument call, as a user makes it."""
    n = 1 << 16
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    tx, ty, tout = ts.from_torch(x), ts.from_torch(y), ts.from_torch(out)
    data = torch.randint(0, 256, (n,), dtype=torch.int32)
    hist = torch.zeros(256, dtype=torch.int32)

    sets = [(torch.empty(n), torch.randn(n), torch.randn(n)) for _ in range(80)]
    turn = [0]

    def rotating():
        # the plan is keyed by layout, not address: 80 sets of tensors (more than the plan cache
        # held when it was keyed by address) take one plan
        o, a, b = sets[turn[0] % 80]
        turn[0] += 1
        vector_add.vector_add(o, a, b)

    return {
        "torch.empty(n) alone": lambda: torch.empty(n),
        "vector_add, fresh out (torch.empty)": lambda: vector_add.vector_add(torch.empty(n), x, y),
        "vector_add, rotating 80 tensor sets": rotating,
        "vector_add, fresh views (x[:], ...)": lambda: vector_add.vector_add(out[:], x[:], y[:]),
        "vector_add, same torch tensors": lambda: vector_add.vector_add(out, x, y),
        "vector_add, same ts tensors": lambda: vector_add.vector_add(tout, tx, ty),
        "histogram (atomic + checked read)": lambda: histogram.launch(hist, data, blocks=16),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--profile", default=None, help="cProfile the case whose name contains this")
    a = ap.parse_args()
    stub_device_work([vector_add.vector_add, histogram.histogram])
    all_cases = cases()
    if a.profile:
        name = next(k for k in all_cases if a.profile in k)
        fn = all_cases[name]
        us_per_call(fn, 100, 1, warmup=50)
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(a.calls):
            fn()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        return
    for name, fn in all_cases.items():
        print(f"{us_per_call(fn, a.calls, warmup=50):8.1f} µs  {name}")
    plans = len(vector_add.vector_add.plans)
    print(f"({plans} vector_add launch plan(s) cached: fresh tensors at any address hit the plan of their layout)")


if __name__ == "__main__":
    main()
