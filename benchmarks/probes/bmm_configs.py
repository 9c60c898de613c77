"""Probe: which tiles suit `ts.kernels.bmm`'s one-tile-per-block kernel on the H200? (It
came before the tuner's bmm class and the persistent kernel, which now win: tune-bmm.log.)

The bench's bmm workloads (attention-like Z = 64 of 1024 x 1024 x 128, and Z = 8 of 2048³,
bf16) with the GPU default config and variants, beside torch.bmm (cuBLAS); the bench's
timer (rotated working set, CUDA graphs, median) after a check against torch. JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/bmm_configs.py "$OUT/bmm_configs.json"
"""
import json
import sys

import torch

# the GPU default when this probe ran: one tile per block (probe-bmm-configs.json)
BASE = dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, tma=False, persistent=False, group=8)
CONFIGS = {   # every key given: the tuned table's bmm entry (from this probe) must not fill any in
    "default 128x128x64 w8 s3": BASE,
    "128x256x64 w8 s3": dict(BASE, block_n=256),
    "128x128x64 w4 s4": dict(BASE, num_warps=4, num_stages=4),
    "128x128x64 w8 s4": dict(BASE, num_stages=4),
    "64x256x64 w4 s4": dict(BASE, block_m=64, block_n=256, num_warps=4, num_stages=4),
    "128x128x128 w8 s3": dict(BASE, block_k=128),
    "default + tma": dict(BASE, tma=True),
    "128x256x64 w8 s3 + tma": dict(BASE, block_n=256, tma=True),
}


def main(out_path):
    import tilesafe.kernels as tk
    from side_by_side import measure, result_check, show
    from tilesafe.bench.timing import rotation_sets
    result = {}
    for z, m, n, k in [(64, 1024, 1024, 128), (8, 2048, 2048, 2048)]:
        sets = rotation_sets(z * (m * k + k * n + m * n) * 2)
        a = [torch.randn(z, m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        b = [torch.randn(z, k, n, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
        c = [torch.empty(z, m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        ref = torch.bmm(a[0].float(), b[0].float())
        impls = {"torch.bmm": (lambda i: torch.bmm(a[i], b[i], out=c[i]), "torch")}
        for key, cfg in CONFIGS.items():
            impls[key] = ((lambda cfg: lambda i: tk.bmm(a[i], b[i], out=c[i], config=cfg))(cfg), "tilesafe")
        entry = result[f"Z={z} {m}x{n}x{k}"] = measure(impls, sets, result_check(c[0], ref), "torch.bmm", "vs_torch")
        show(f"Z={z} {m}x{n}x{k}", entry, "vs_torch", 28)
        torch.cuda.empty_cache()
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
