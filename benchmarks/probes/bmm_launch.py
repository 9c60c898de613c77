"""Probe: is bmm's 0-1.2% gap to its twin at K = 128 in the kernel or in the launch?

Z = 64 products of 1024 x 1024 x 128 (bf16, the bench's workload, ~50 us) timed side by
side: the library call (its prepared launch goes straight to the compiled kernel), the
same call with the prepared launch turned off (every call through Triton's dispatcher, as
the twin launches), the raw Triton twin, and torch.bmm; once in the bench's mode (eager,
one event pair per launch) and once inside CUDA graphs, where no host or stream work
between launches counts. JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/bmm_launch.py "$OUT/bmm_launch.json"
"""
import json
import sys

import torch

Z, M, N, K = 64, 1024, 1024, 128


def main(out_path):
    import tilesafe.kernels as tk
    from side_by_side import measure, result_check, show
    from tilesafe.bench.observe import Observer
    from tilesafe.bench.timing import Policy, rotation_sets
    from tilesafe.bench.twins.matmul import bmm_twin
    from tilesafe.runtime.launch_plan import LaunchPlan
    mm = sys.modules["tilesafe.kernels.matmul"]
    sets = rotation_sets(Z * (M * K + K * N + M * N) * 2)
    a = [torch.randn(Z, M, K, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    b = [torch.randn(Z, K, N, device="cuda", dtype=torch.bfloat16) / K ** 0.5 for _ in range(sets)]
    c = [torch.empty(Z, M, N, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ref = torch.bmm(a[0].float(), b[0].float())
    with Observer([mm.bmm_kernel, mm.bmm_persistent_kernel]) as seen:
        tk.bmm(a[0], b[0], out=c[0])
    twin = bmm_twin(seen, torch.cuda.get_device_properties(0).multi_processor_count)
    matches = LaunchPlan.matches

    def dispatched(i):
        LaunchPlan.matches = lambda *args: False     # no cached plan: bound again, through Triton's dispatcher
        try:
            tk.bmm(a[i], b[i], out=c[i])
        finally:
            LaunchPlan.matches = matches
    impls = {"tilesafe": (lambda i: tk.bmm(a[i], b[i], out=c[i]), "tilesafe"),
             "tilesafe, dispatcher": (dispatched, "tilesafe"),
             "twin": (lambda i: twin(c[i], a[i], b[i]), "torch"),
             "torch.bmm": (lambda i: torch.bmm(a[i], b[i], out=c[i]), "torch")}

    check = result_check(c[0], ref)
    result = {"kernel": next(iter(seen))}
    for mode, policy in (("eager", Policy()), ("graph", Policy(graph_below_us=1000.0))):
        entry = result[mode] = measure(impls, sets, check, "twin", "vs_twin", policy=policy)
        show(f"bmm bf16 Z={Z} {M}x{N}x{K}, {mode}", entry, "vs_twin", 24)
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
