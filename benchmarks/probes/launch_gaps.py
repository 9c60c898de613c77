"""Probe: what runs on the GPU around an eager tilesafe launch, against its raw Triton twin?

Eagerly timed, bmm (Z = 64 of 1024 x 1024 x 128) and RoPE (16384 x 32 x 128) read 0.5-1%
slower than their twins while their kernels, inside CUDA graphs, are as fast or faster. This
profiles 20 back-to-back launches of each (torch.profiler, CUDA activity) behind a GPU
sleep, and reports every GPU activity's name, mean duration and the mean idle gap between
consecutive kernels. JSON to argv[1].
    PYTHONPATH=src:benchmarks/probes python3 benchmarks/probes/launch_gaps.py "$OUT/gaps.json"
"""
import json
import statistics
import sys

import torch

REPS = 20


def _profile(launch):
    from torch.profiler import ProfilerActivity, profile
    for i in range(3):
        launch(i)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(50_000_000)                # the queue fills while the GPU sleeps
        for i in range(REPS):
            launch(i)
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    names = {}
    for e in events:
        names.setdefault(e.name[:80], []).append(e.time_range.end - e.time_range.start)
    kernels = [e for e in events if "sleep" not in e.name and "Memcpy" not in e.name and "Memset" not in e.name]
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(kernels, kernels[1:])]
    return {"activities": {n: {"count": len(d), "mean_us": statistics.mean(d)} for n, d in names.items()},
            "kernel_gap_us": statistics.median(gaps) if gaps else None,
            "kernel_us": statistics.median(e.time_range.end - e.time_range.start for e in kernels)}


def main(out_path):
    import tilesafe.kernels as tk
    from tilesafe.bench.observe import Observer
    from tilesafe.bench.twins.matmul import bmm_twin
    from tilesafe.bench.twins.rows import rope_twin
    mm, rp = sys.modules["tilesafe.kernels.matmul"], sys.modules["tilesafe.kernels.rope"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    z, m, n, k = 64, 1024, 1024, 128
    a = [torch.randn(z, m, k, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.randn(z, k, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    c = [torch.empty(z, m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    with Observer([mm.bmm_kernel, mm.bmm_persistent_kernel]) as seen:
        tk.bmm(a[0], b[0], out=c[0])
    twin = bmm_twin(seen, sms)
    x = [torch.randn(16384, 32, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    pos = torch.arange(16384, device="cuda")
    with Observer([rp.rope_kernel]) as seen_rope:
        tk.rope(x[0], pos, 1e6, out=x[1])
    rtwin = rope_twin(seen_rope)
    out = {
        "bmm tilesafe": _profile(lambda i: tk.bmm(a[i % 2], b[i % 2], out=c[i % 2])),
        "bmm twin": _profile(lambda i: twin(c[i % 2], a[i % 2], b[i % 2])),
        "rope tilesafe": _profile(lambda i: tk.rope(x[i % 2], pos, 1e6, out=x[1 - i % 2])),
        "rope twin": _profile(lambda i: rtwin(x[1 - i % 2], x[i % 2], pos, 1e6)),
    }
    for name, r in out.items():
        print(f"{name:16} kernel {r['kernel_us']:7.2f} us  gap {r['kernel_gap_us']:6.2f} us  "
              + "; ".join(f"{a} x{v['count']} {v['mean_us']:.2f}" for a, v in r["activities"].items())[:300])
    json.dump(out, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
