"""Probe: does a TMA descriptor built on the device (tl.make_tensor_descriptor, what tilesafe
emits) cost time that one built on the host (TensorDescriptor argument) does not?

Raw Triton GEMMs, one kernel body, three ways to address a and b: pointers, device-side
descriptors, host-side descriptors. Median of CUDA-event timings, L2 flushed between runs
(triton.testing.do_bench), after a check against torch. Prints a table; JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/tma_descriptors.py "$OUT/tma_probe.json"
"""
import json
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    """c = a @ w.T with a (M, K), b = w (N, K) row-major; every size divides its tile. MODE 0:
    pointers, 1: descriptors built here (on the device), 2: a and b are host-built descriptors."""
    i, j = tl.program_id(0), tl.program_id(1)
    if MODE == 1:
        a = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b = tl.make_tensor_descriptor(b, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    acc = tl.zeros((BM, BN), tl.float32)
    rm, rn, rk = i * BM + tl.arange(0, BM), j * BN + tl.arange(0, BN), tl.arange(0, BK)
    for k in range(0, K, BK):
        if MODE == 0:
            at = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            bt = tl.load(b + rn[:, None] * K + (k + rk)[None, :])
        else:
            at = a.load([i * BM, k])
            bt = b.load([j * BN, k])
        acc = tl.dot(at, bt.T, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def main(out_path):
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    shapes = [("4B qkv M=128", 128, 6144, 2560), ("4B o M=128", 128, 2560, 4096),
              ("4B gate_up M=128", 128, 19456, 2560), ("32B o M=128", 128, 5120, 8192),
              ("4B o M=2048", 2048, 2560, 4096), ("4096^3", 4096, 4096, 4096)]
    tiles = [(128, 128, 64, 8, 3), (64, 128, 128, 4, 3), (128, 128, 64, 4, 4)]
    rows = []
    for name, m, n, k in shapes:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        ref = torch.nn.functional.linear(x, w)
        t_torch = triton.testing.do_bench(lambda: torch.nn.functional.linear(x, w), warmup=50, rep=300)
        for bm, bn, bk, warps, stages in tiles:
            row = {"shape": name, "tile": [bm, bn, bk, warps, stages], "torch_us": t_torch * 1e3}
            for mode, label in ((0, "pointer"), (1, "device_desc"), (2, "host_desc")):
                c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                if mode == 2:
                    args = (TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]))
                else:
                    args = (x, w)
                grid = (m // bm, n // bn)

                def run():
                    gemm[grid](*args, c, m, n, k, BM=bm, BN=bn, BK=bk, MODE=mode, num_warps=warps,
                               num_stages=stages)
                try:
                    run()
                    torch.cuda.synchronize()
                    err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                    row[label + "_us"] = triton.testing.do_bench(run, warmup=50, rep=300) * 1e3 if err < 2e-2 else None
                    row[label + "_err"] = err
                except Exception as e:   # noqa: BLE001 - recorded
                    row[label + "_error"] = str(e)[:200]
            rows.append(row)
            fmt = lambda v: f"{v:8.1f}" if isinstance(v, float) else f"{'-':>8}"   # noqa: E731
            print(f"{name:18} {str(row['tile']):22} torch {fmt(row['torch_us'])} ptr {fmt(row.get('pointer_us'))} "
                  f"dev {fmt(row.get('device_desc_us'))} host {fmt(row.get('host_desc_us'))}", flush=True)
    json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tma_probe.json")
