"""Paged KV kernels on the GPU: the decode attention's bandwidth and the write's time per step.

Run on a GPU: `PYTHONPATH=src python benchmarks/paged_kv.py benchmarks/results/h200/paged_kv.json`
(`--smoke` runs tiny shapes on the CPU reference backend, untimed, to check the script).

Qwen3-4B's attention layout (32 query heads, 8 KV heads of 128, bf16), blocks of 16
positions, every sequence `context` positions long, at batch 1, 8, 32 and 128. Each step's
block tables point into its own part of a pool of at least 3x L2 (180 MB), and a captured
graph replays `ROTATE` steps over those parts, so the cache is read from HBM. The attention
row reports the KV bytes a step must read over its time (against the 4.8 TB/s datasheet)
and, measured in the same run, a torch read of the same number of bytes (`sum` of a bf16
tensor); the write row the time of a step's `paged_kv_write` (B tokens, device check).
"""
import json
import sys
import time

import torch

import tilesafe as ts
from tilesafe.kernels.paged_kv import paged_decode_attention, paged_decode_workspace, paged_kv_write

H, HKV, D, BS = 32, 8, 128, 16
L2_X3 = 180 << 20
NOMINAL = 4.8e12


def setup(b, context, device, dtype):
    per_step = b * context // BS                                  # blocks a step reads
    step_bytes = 2 * b * context * HKV * D * 2                    # K and V, bf16
    rotate = max(1, min(64, -(-L2_X3 // step_bytes)))
    pool = per_step * rotate
    kc, vc = (torch.randn(pool, BS, HKV, D, device=device).to(dtype) for _ in range(2))
    perm = torch.randperm(pool, device=device).to(torch.int32)
    tables = [perm[r * per_step:(r + 1) * per_step].reshape(b, context // BS) for r in range(rotate)]
    lens = torch.full((b,), context, dtype=torch.int32, device=device)
    q = torch.randn(b, H, D, device=device).to(dtype)
    return kc, vc, tables, lens, q, step_bytes


def timed(step, reps: int, device) -> float:
    """Seconds per call of `step` (a list of `reps` launches), from a captured graph's replays."""
    if device == "cpu":
        t0 = time.perf_counter()
        step()
        return (time.perf_counter() - t0) / reps
    step()                                                        # compile, warm the allocator
    with ts.graph() as g:
        step()
    times = []
    for _ in range(10):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return sorted(times)[len(times) // 2] / reps


def torch_read(nbytes: int, device) -> float:
    x = torch.randn(max(L2_X3, nbytes) // 2, device=device).to(torch.bfloat16)
    x.sum()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        x.sum()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / 10 * nbytes / (x.numel() * 2)


def row(b, context, device, dtype):
    kc, vc, tables, lens, q, step_bytes = setup(b, context, device, dtype)
    out, ws = torch.empty_like(q), paged_decode_workspace(q, kc, max_len=context)

    def attend():
        for t in tables:
            paged_decode_attention(q, kc, vc, t, lens, out=out, workspace=ws)
    attn = timed(attend, len(tables), device)
    k_new, v_new = (torch.randn(b, HKV, D, device=device).to(dtype) for _ in range(2))
    slots = (tables[0][:, -1].long() * BS + BS - 1).to(torch.int32)        # each sequence's last position
    dropped = torch.zeros(b, dtype=torch.int32, device=device)

    def write():
        for _ in range(len(tables)):
            paged_kv_write(kc, vc, k_new, v_new, slots, check="device", dropped=dropped)
    wr = timed(write, len(tables), device)
    read = torch_read(step_bytes, device) if device != "cpu" else float("nan")
    return dict(batch=b, context=context, kv_bytes=step_bytes, attention_us=attn * 1e6,
                attention_tb_s=step_bytes / attn / 1e12, fraction_of_nominal=step_bytes / attn / NOMINAL,
                torch_read_us=read * 1e6, write_us=wr * 1e6)


def main(argv):
    smoke = "--smoke" in argv
    paths = [a for a in argv if not a.startswith("--")]
    if smoke:
        global H, HKV, D, BS, L2_X3
        H, HKV, D, BS, L2_X3 = 4, 2, 16, 4, 1 << 12
        cases, device, dtype = [(1, 8), (2, 16)], "cpu", torch.float32
    else:
        cases, device, dtype = [(b, c) for c in (1024, 4096) for b in (1, 8, 32, 128) if b * c <= 128 * 1024], \
            "cuda", torch.bfloat16
    with ts.backend("reference" if smoke else "triton"):
        rows = [row(b, c, device, dtype) for b, c in cases]
    for r in rows:
        print(f"B={r['batch']:4d} ctx={r['context']:5d}  attention {r['attention_us']:9.1f} us "
              f"{r['attention_tb_s']:6.3f} TB/s ({100 * r['fraction_of_nominal']:5.1f}% of 4.8)  "
              f"torch read {r['torch_read_us']:8.1f} us  write {r['write_us']:7.1f} us")
    if paths:
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        with open(paths[0], "w") as f:
            json.dump({"gpu": gpu, "layout": dict(heads=H, kv_heads=HKV, head_dim=D, block_size=BS), "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
