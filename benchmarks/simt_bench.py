"""The SIMT route on the GPU: each example against torch and against the same algorithm as a plain
`numba.cuda.jit` kernel (device arrays made once), plus the host cost of an eager launch.

Run on a GPU:   PYTHONPATH=src python benchmarks/simt_bench.py [--out DIR] [--quick]
Plot anywhere:  python benchmarks/simt_bench.py --plot DIR/simt-....json

Every result is checked against torch before it is timed. GPU times are CUDA-event medians over
a loop of launches (the workloads are large, >= ~0.2 ms, so the host's launch cost hides behind
the GPU and L2 does not hold the operands). Host times are per call over a row of calls with
small tensors (benchmarks/host_timing.py), side by side in one run.
"""
import argparse
import functools
import json
import math
import statistics
import sys
import time
from pathlib import Path

RAW = {}     # name -> plain numba.cuda.jit kernel (defined in _raw_kernels, after numba is imported)


def _raw_kernels():
    from numba import cuda, float32

    @cuda.jit
    def vector_add(out, x, y):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = x[i] + y[i]

    @cuda.jit
    def vector_add_chunk4(out, x, y):      # what the safe chunk(4) walk lowers to: loads first, stores after
        i = cuda.blockIdx.x * 1024 + cuda.threadIdx.x
        n = out.shape[0]
        if i + 768 < n:
            a, b = x[i] + y[i], x[i + 256] + y[i + 256]
            c, d = x[i + 512] + y[i + 512], x[i + 768] + y[i + 768]
            out[i], out[i + 256], out[i + 512], out[i + 768] = a, b, c, d
        else:
            for j in range(4):
                if i + j * 256 < n:
                    out[i + j * 256] = x[i + j * 256] + y[i + j * 256]

    block_add = _raw_block_add()

    @cuda.jit
    def sum_all(total, x):
        stride = cuda.gridDim.x * 256
        n = x.shape[0]
        acc = float32(0.0)
        i = cuda.grid(1)
        while i + 7 * stride < n:      # session 16's safe form: eight scalar reads in flight a thread
            for u in range(8):
                acc += x[i + u * stride]
            i += 8 * stride
        while i < n:
            acc += x[i]
            i += stride
        block_add(total, acc)

    @cuda.jit
    def histogram(hist, x):
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            cuda.atomic.add(hist, x[i], 1)

    @cuda.jit
    def block_sum(out, x):      # the safe example's form: K = 4096 a constant, 16 reads a thread unrolled
        partial = cuda.shared.array(8, float32)
        acc = float32(0.0)
        first = cuda.blockIdx.x * 4096 + cuda.threadIdx.x
        for j in range(16):
            if first + j * 256 < x.shape[0]:
                acc += x[first + j * 256]
        for off in (16, 8, 4, 2, 1):
            acc += cuda.shfl_xor_sync(0xFFFFFFFF, acc, off)
        lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
        if lane == 0:
            partial[warp] = acc
        cuda.syncthreads()
        total = partial[lane] if lane < 8 else float32(0.0)
        for off in (16, 8, 4, 2, 1):
            total += cuda.shfl_xor_sync(0xFFFFFFFF, total, off)
        if cuda.threadIdx.x == 0:
            out[cuda.blockIdx.x] = total

    @cuda.jit
    def softmax_rows(out, x):
        row = cuda.blockIdx.x * 4 + cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        if row >= x.shape[0]:
            return
        m = float32(-math.inf)
        for c in range(lane, x.shape[1], 32):
            m = max(m, x[row, c])
        for off in (16, 8, 4, 2, 1):
            m = max(m, cuda.shfl_xor_sync(0xFFFFFFFF, m, off))
        s = float32(0.0)
        for c in range(lane, x.shape[1], 32):
            s += math.exp(x[row, c] - m)
        for off in (16, 8, 4, 2, 1):
            s += cuda.shfl_xor_sync(0xFFFFFFFF, s, off)
        for c in range(lane, x.shape[1], 32):
            out[row, c] = math.exp(x[row, c] - m) / s

    @cuda.jit
    def transpose_per_thread(out, x):      # the old example's form: a 32 x 32 block, one element a thread
        tile = cuda.shared.array((32, 33), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        bx, by = cuda.blockIdx.x, cuda.blockIdx.y
        r, c = bx * 32 + ty, by * 32 + tx
        if r < x.shape[0] and c < x.shape[1]:
            tile[ty, tx] = x[r, c]
        cuda.syncthreads()
        r, c = by * 32 + ty, bx * 32 + tx
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = tile[tx, ty]

    @cuda.jit
    def transpose(out, x):      # the safe example's form: a 64 x 8 block, 8 elements a thread, loads first
        tile = cuda.shared.array((64, 65), float32)
        v = cuda.local.array(8, float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        r0, c0 = cuda.blockIdx.x * 64, cuda.blockIdx.y * 64
        for j in range(8):
            r, c = r0 + ty + j * 8, c0 + tx
            v[j] = x[r, c] if r < x.shape[0] and c < x.shape[1] else float32(0.0)
        for j in range(8):
            tile[ty + j * 8, tx] = v[j]
        cuda.syncthreads()
        for j in range(8):
            v[j] = tile[tx, ty + j * 8]
        for j in range(8):
            r, c = c0 + ty + j * 8, r0 + tx
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = v[j]

    @cuda.jit
    def sgemm(c, a, b):
        a_s = cuda.shared.array((16, 16), float32)
        b_s = cuda.shared.array((16, 16), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row, col = cuda.blockIdx.y * 16 + ty, cuda.blockIdx.x * 16 + tx
        acc = float32(0.0)
        for k0 in range(0, a.shape[1], 16):
            a_s[ty, tx] = a[row, k0 + tx] if row < a.shape[0] and k0 + tx < a.shape[1] else float32(0.0)
            b_s[ty, tx] = b[k0 + ty, col] if k0 + ty < b.shape[0] and col < b.shape[1] else float32(0.0)
            cuda.syncthreads()
            for kk in range(16):
                acc += a_s[ty, kk] * b_s[kk, tx]
            cuda.syncthreads()
        if row < c.shape[0] and col < c.shape[1]:
            c[row, col] = acc

    RAW.update(vector_add=vector_add, vector_add_chunk4=vector_add_chunk4, histogram=histogram,
               block_sum=block_sum, sum_all=sum_all, softmax_rows=softmax_rows, transpose=transpose,
               transpose_per_thread=transpose_per_thread, sgemm=sgemm)


@functools.cache
def _raw_block_add():
    """total[0] += the block's sum of acc (256 threads): warp shuffles, the 8 warps' partials through
    shared memory, one atomic per block (the tail of every raw sum kernel here)."""
    from numba import cuda, float32

    @cuda.jit(device=True, inline=True)
    def block_add(total, acc):
        partial = cuda.shared.array(8, float32)
        for off in (16, 8, 4, 2, 1):
            acc += cuda.shfl_xor_sync(0xFFFFFFFF, acc, off)
        lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
        if lane == 0:
            partial[warp] = acc
        cuda.syncthreads()
        t = partial[lane] if lane < 8 else float32(0.0)
        for off in (16, 8, 4, 2, 1):
            t += cuda.shfl_xor_sync(0xFFFFFFFF, t, off)
        if cuda.threadIdx.x == 0:
            cuda.atomic.add(total, 0, t)
    return block_add


@functools.cache
def raw_sum(unroll: int, vec: bool):
    """Grid-stride sum, `unroll` loads in flight a thread (each 128-bit when vec), warp shuffles, one
    shared phase, one atomic per block."""
    from numba import cuda, float32

    from tilesafe.simt.vector_access import intrinsics
    vld4 = intrinsics()["__vld4"]
    U = unroll
    block_add = _raw_block_add()

    @cuda.jit
    def sum_vec(total, x):
        n = x.shape[0]
        n4 = n // 4
        stride = cuda.gridDim.x * 256
        acc = float32(0.0)
        i = cuda.grid(1)
        while i + (U - 1) * stride < n4:
            for u in range(U):
                a, b, c, d = vld4(x, (i + u * stride) * 4)
                acc += (a + b) + (c + d)
            i += U * stride
        while i < n4:
            a, b, c, d = vld4(x, i * 4)
            acc += (a + b) + (c + d)
            i += stride
        j = n4 * 4 + cuda.grid(1)
        if j < n:
            acc += x[j]
        block_add(total, acc)

    @cuda.jit
    def sum_scalar(total, x):
        n = x.shape[0]
        stride = cuda.gridDim.x * 256
        acc = float32(0.0)
        i = cuda.grid(1)
        while i + (U - 1) * stride < n:
            for u in range(U):
                acc += x[i + u * stride]
            i += U * stride
        while i < n:
            acc += x[i]
            i += stride
        block_add(total, acc)
    return sum_vec if vec else sum_scalar


@functools.cache
def raw_pairs(tc: int, rows: int):
    """transpose_pairs as a plain numba kernel (int32 words, loads first): the safe one's raw twin."""
    from numba import cuda, int32
    T2, T1, K, R = 2 * tc, tc + 1, 2 * tc // rows, rows

    @cuda.jit
    def pairs(out, x):
        tile = cuda.shared.array((T2, T1), int32)
        v = cuda.local.array(K, int32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        r0, w0 = cuda.blockIdx.x * T2, cuda.blockIdx.y * tc
        for j in range(K):
            a = ty + j * R
            r, c = r0 + 2 * (a % tc) + a // tc, w0 + tx
            v[j] = x[r, c] if r < x.shape[0] and c < x.shape[1] else 0
        for j in range(K):
            tile[ty + j * R, tx] = v[j]
        cuda.syncthreads()
        for j in range(K):
            a = ty + j * R
            sh, w = 16 * (a % 2), a // 2
            v[j] = ((tile[tx, w] >> sh) & 0xFFFF) | ((tile[tx + tc, w] >> sh) << 16)
        for j in range(K):
            r, c = cuda.blockIdx.y * T2 + ty + j * R, cuda.blockIdx.x * tc + tx
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = v[j]
    return pairs


@functools.cache
def raw_softmax_staged(k: int):
    """softmax_rows_staged as a plain numba kernel: a block of 256 per row, the row in shared memory."""
    import math

    from numba import cuda, float32
    K = k

    @cuda.jit(device=True, inline=True)
    def block_reduce(v, part, is_max):
        for off in (16, 8, 4, 2, 1):
            o = cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
            v = max(v, o) if is_max else v + o
        lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
        if lane == 0:
            part[warp] = v
        cuda.syncthreads()
        t = part[lane] if lane < 8 else (float32(-math.inf) if is_max else float32(0.0))
        for off in (16, 8, 4, 2, 1):
            o = cuda.shfl_xor_sync(0xFFFFFFFF, t, off)
            t = max(t, o) if is_max else t + o
        return t

    @cuda.jit(launch_bounds=(256, 8))      # as the safe kernel's contract (blocks_per_sm=8)
    def softmax_staged(out, x):
        row = cuda.shared.array((K, 256), float32)
        pm = cuda.shared.array(8, float32)
        ps = cuda.shared.array(8, float32)
        v = cuda.local.array(K, float32)
        b, t, n = cuda.blockIdx.x, cuda.threadIdx.x, x.shape[1]
        for j in range(K):
            c = j * 256 + t
            v[j] = x[b, c] if c < n else float32(-math.inf)
        for j in range(K):
            row[j, t] = v[j]
        cuda.syncthreads()
        m = float32(-math.inf)
        for j in range(K):
            m = max(m, row[j, t])
        m = block_reduce(m, pm, True)
        s = float32(0.0)
        for j in range(K):
            s += math.exp(row[j, t] - m)
        inv = float32(1.0) / block_reduce(s, ps, False)
        for c in range(t, n, 256):
            out[b, c] = math.exp(row[c // 256, c % 256] - m) * inv
    return softmax_staged


def gpu_ms(fn, iters=10, repeats=5) -> float:
    """Median milliseconds per call of `fn` over loops of `iters` calls between CUDA events."""
    import torch
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def workloads(quick: bool):
    """(name, setup) pairs; setup() -> dict(bytes, flops, safe, raw, torch, check)."""
    import torch
    from numba import cuda

    from tilesafe.simt.examples import block_sum, histogram, sgemm, softmax_rows, transpose, transpose_half, vector_add
    scale = 4 if quick else 1

    def arr(t):
        return cuda.as_cuda_array(t)

    def w_vector_add():
        n = (1 << 28) // scale
        x, y, out = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
        dx, dy, do = arr(x), arr(y), arr(out)
        grid = (n + 255) // 256
        return dict(bytes=3 * 4 * n, out=out, want=lambda: x + y,
                    safe=lambda: vector_add.vector_add(out, x, y),
                    safe_chunk4=lambda: vector_add.vector_add_chunked(out, x, y, K=4),
                    safe_chunk8=lambda: vector_add.vector_add_chunked(out, x, y, K=8),
                    safe_run4_128bit=lambda: vector_add.vector_add_runs(out, x, y, K=4),
                    raw=lambda: RAW["vector_add"][grid, 256](do, dx, dy),
                    raw_chunk4=lambda: RAW["vector_add_chunk4"][(n + 1023) // 1024, 256](do, dx, dy),
                    torch=lambda: torch.add(x, y, out=out))

    def w_histogram():
        n = (1 << 28) // scale
        x = torch.randint(0, 256, (n,), device="cuda", dtype=torch.int32)
        hist = torch.zeros(256, dtype=torch.int32, device="cuda")
        dh, dx = arr(hist), arr(x)
        blocks = min(4096, n // 1024)
        want = torch.bincount(x, minlength=256).int()

        def safe():
            hist.zero_()
            histogram.launch(hist, x, blocks)

        def safe_shared():
            hist.zero_()
            histogram.launch256(hist, x)

        def raw():
            hist.zero_()
            RAW["histogram"][blocks, 256](dh, dx)
        return dict(bytes=4 * n, out=hist, want=lambda: want, safe=safe, safe_shared_bins=safe_shared, raw=raw,
                    torch=lambda: torch.bincount(x, minlength=256))

    def w_block_sum():
        n, k = (1 << 28) // scale, 4096
        x = torch.randn(n, device="cuda")
        out = torch.empty(n // k, device="cuda")
        dx, do = arr(x), arr(out)
        return dict(bytes=4 * n, out=out, want=lambda: x.view(-1, k).sum(1), tol=1e-2,
                    safe=lambda: block_sum.block_sum(out, x, K=k),
                    raw=lambda: RAW["block_sum"][n // k, 256](do, dx),
                    torch=lambda: torch.sum(x.view(-1, k), 1))

    def w_sum_all():
        n = (1 << 28) // scale
        raw4 = raw_sum(block_sum.RUNS, True)           # the safe example's form: runs of 4 as float4 loads
        x = torch.randn(n, device="cuda")
        total = torch.zeros(1, device="cuda")
        dt, dx = arr(total), arr(x)
        blocks = torch.cuda.get_device_properties(0).multi_processor_count * block_sum.BLOCKS_PER_SM
        copy_out = torch.empty_like(x)

        def safe():
            total.zero_()
            block_sum.launch_sum(total, x, blocks)

        def raw():
            total.zero_()
            raw4[blocks, 256](dt, dx)

        def raw_scalar_x8():       # session 16's form: eight scalar reads in flight a thread
            total.zero_()
            RAW["sum_all"][blocks, 256](dt, dx)
        return dict(bytes=4 * n, copy_bytes=2 * 4 * n, out=total, want=lambda: x.double().sum().float().reshape(1),
                    tol=1e-2, safe=safe, raw=raw, raw_scalar_x8=raw_scalar_x8, torch=lambda: torch.sum(x),
                    copy=lambda: copy_out.copy_(x))

    def w_softmax():
        r, c = 32768 // scale, 4096
        x = torch.randn(r, c, device="cuda")
        out = torch.empty(r, c, device="cuda")
        dx, do = arr(x), arr(out)
        copy_out = torch.empty_like(x)
        k = -(-c // 256)
        staged = raw_softmax_staged(k)
        return dict(bytes=2 * 4 * r * c, copy_bytes=2 * 4 * r * c, out=out, want=lambda: torch.softmax(x, 1), tol=1e-5,
                    safe=lambda: softmax_rows.softmax_rows_staged(out, x, K=k),      # a block a row, in shared
                    safe_warp_per_row=lambda: softmax_rows.softmax_rows(out, x),
                    raw=lambda: staged[r, 256](do, dx),
                    raw_warp_per_row=lambda: RAW["softmax_rows"][(r + 3) // 4, 128](do, dx),
                    torch=lambda: torch.softmax(x, 1), copy=lambda: copy_out.copy_(x))

    def w_transpose():
        r = c = 16384 // (2 if quick else 1)
        x = torch.randn(r, c, device="cuda")
        out = torch.empty(c, r, device="cuda")
        dx, do = arr(x), arr(out)
        copy_out = torch.empty_like(x)
        return dict(bytes=2 * 4 * r * c, copy_bytes=2 * 4 * r * c, out=out, want=lambda: x.t(),
                    safe=lambda: transpose.transpose(out, x),
                    raw=lambda: RAW["transpose"][(r // 64, c // 64), (64, 8)](do, dx),
                    raw_per_thread=lambda: RAW["transpose_per_thread"][(r // 32, c // 32), (32, 32)](do, dx),
                    torch=lambda: x.t().contiguous(), copy=lambda: copy_out.copy_(x))

    def w_transpose_f16():
        r = c = 16384 // (2 if quick else 1)
        x = torch.randn(r, c, device="cuda").half()
        out = torch.empty(c, r, device="cuda", dtype=torch.float16)
        dx32, do32 = arr(x.view(torch.int32)), arr(out.view(torch.int32))
        copy_out = torch.empty_like(x)
        tc, rows = transpose_half.TC, transpose_half.ROWS
        pairs = raw_pairs(tc, rows)
        grid = ((r // 2 + tc - 1) // tc, (c + 2 * tc - 1) // (2 * tc))
        return dict(bytes=2 * 2 * r * c, copy_bytes=2 * 2 * r * c, out=out, want=lambda: x.t(), tol=0,
                    safe=lambda: transpose_half.transpose_f16(out, x),          # pairs of halves as int32 words
                    safe_halves=lambda: transpose_half.transpose_halves(out, x),
                    raw=lambda: pairs[grid, (tc, rows)](do32, dx32),
                    torch=lambda: x.t().contiguous(), copy=lambda: copy_out.copy_(x))

    def w_sgemm():
        m = n = k = 4096 // (2 if quick else 1)
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        out = torch.empty(m, n, device="cuda")
        da, db, do = arr(a), arr(b), arr(out)
        return dict(flops=2 * m * n * k, out=out, want=lambda: a @ b, tol=1e-2,
                    safe=lambda: sgemm.sgemm(out, a, b),
                    raw=lambda: RAW["sgemm"][(n // 16, m // 16), (16, 16)](do, da, db),
                    torch=lambda: torch.matmul(a, b))

    def w_top_p():
        from tilesafe.simt.examples.top_p import top_p_sample
        rows, vocab = 64 // scale, 151936
        probs = torch.softmax(torch.randn(rows, vocab, device="cuda") * 4, dim=1)
        expo = torch.empty_like(probs).exponential_()
        token = torch.empty(rows, dtype=torch.int32, device="cuda")

        def torch_top_p():       # sort, cumulative mass, mask, exponential race
            s, idx = torch.sort(probs, dim=1, descending=True)
            keep = (torch.cumsum(s, 1) - s) < 0.9
            keys = torch.where(keep, s / torch.gather(expo, 1, idx), -1.0)
            return torch.gather(idx, 1, keys.argmax(1, keepdim=True)).squeeze(1)
        want = torch_top_p().int()
        # the engine's sampler (a tile kernel, kernels/sampling.py) with top-p alone, on log(probs): the
        # issue offers the SIMT sampler to the engine if it is faster (their random numbers differ, so
        # this is timed, not compared)
        from tilesafe.kernels import sampling
        logits = torch.log(probs)
        knobs = (torch.ones(rows, device="cuda"), torch.zeros(rows, dtype=torch.int32, device="cuda"),
                 torch.full((rows,), 0.9, device="cuda"), torch.arange(rows, dtype=torch.int64, device="cuda"),
                 torch.zeros(rows, dtype=torch.int32, device="cuda"))
        tile_out = (torch.empty(rows, dtype=torch.int32, device="cuda"), torch.empty(rows, device="cuda"))
        return dict(bytes=2 * 4 * rows * vocab, out=token, want=lambda: want, tol=0, exact_fraction=0.9,
                    safe=lambda: top_p_sample(token, probs, expo, 0.9, STEPS=30), torch=torch_top_p,
                    tile_engine_sampler=lambda: sampling.sample(logits, *knobs, out=tile_out[0],
                                                                logprobs_out=tile_out[1]))

    return [("vector_add", w_vector_add), ("histogram", w_histogram), ("block_sum", w_block_sum),
            ("sum_all", w_sum_all),
            ("softmax_rows", w_softmax), ("transpose", w_transpose), ("transpose_f16", w_transpose_f16),
            ("sgemm", w_sgemm), ("top_p", w_top_p)]


def run_workload(name, setup) -> dict:
    import torch
    w = setup()
    rec = {"name": name, "bytes": w.get("bytes"), "flops": w.get("flops"), "impls": {}}
    tol = w.get("tol", 1e-5)
    impls = [k for k in w if k.startswith(("safe", "raw", "torch", "copy", "tile")) and callable(w[k])]
    for impl in impls:     # correctness first, every implementation of the kernel
        if not impl.startswith(("safe", "raw")):
            continue
        w["out"].fill_(float("nan")) if w["out"].dtype.is_floating_point else w["out"].zero_()
        w[impl]()
        torch.cuda.synchronize()
        want = w["want"]()
        if "exact_fraction" in w:    # sampling: f32 sums in another order may move a boundary token
            ok = (w["out"] == want).float().mean().item() >= w["exact_fraction"]
        else:
            ok = torch.allclose(w["out"].float(), want.float(), rtol=tol, atol=tol)
        rec.setdefault("correct", {})[impl] = bool(ok)
    for impl in impls:
        if impl in w:
            ms = gpu_ms(w[impl])
            entry = {"ms": ms}
            moved = w.get("copy_bytes") if impl == "copy" else rec["bytes"]
            if moved:
                entry["tbps"] = moved / ms / 1e9
            if rec["flops"]:
                entry["tflops"] = rec["flops"] / ms / 1e9
            rec["impls"][impl] = entry
    t = rec["impls"]
    rec["safe_over_raw"] = t["safe"]["ms"] / t["raw"]["ms"] if "raw" in t else None
    rec["torch_over_safe"] = t["torch"]["ms"] / t["safe"]["ms"]     # >= 1: safe SIMT is faster than torch
    best = min((k for k in t if k.startswith("safe")), key=lambda k: t[k]["ms"])
    rec["best_safe"] = best
    rec["torch_over_best_safe"] = t["torch"]["ms"] / t[best]["ms"]
    if "tile_engine_sampler" in t:
        rec["tile_sampler_over_safe"] = t["tile_engine_sampler"]["ms"] / t["safe"]["ms"]   # > 1: offer SIMT's
    if "copy" in t and "tbps" in t[best]:    # bandwidth as a fraction of a plain copy's (the 90% target)
        rec["best_safe_over_copy_bandwidth"] = t[best]["tbps"] / t["copy"]["tbps"]
    del w
    torch.cuda.empty_cache()
    return rec


def host_costs() -> dict:
    """Host µs per eager launch of a small vector add: safe SIMT with torch tensors (wrapped on
    each call), numba's dispatcher (device arrays made once, and wrapped per call), torch.add."""
    import torch
    from numba import cuda

    import tilesafe as ts
    from host_timing import host_us_side_by_side     # benchmarks/ is the script's directory
    from tilesafe.simt import gpu_launch
    from tilesafe.simt.examples.vector_add import vector_add
    from tilesafe.simt.launch_plans import layout
    n = 4096
    x, y, out = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    dx, dy, do = cuda.as_cuda_array(x), cuda.as_cuda_array(y), cuda.as_cuda_array(out)
    tx, ty, tout = ts.from_torch(x), ts.from_torch(y), ts.from_torch(torch.empty(n, device="cuda"))
    raw = RAW["vector_add"]
    vector_add(out, x, y).sync()
    vector_add(out, x, y).sync()                       # the layout's plan, compiled and on the lean path
    plan = vector_add.plans[layout((out, x, y), {}, None)[0]]
    handle = torch.cuda.current_stream().cuda_stream
    # out, x and y's parameters, kept apart: the plan's array gets each launch's pointers
    params = gpu_launch.Params([type(v)(v.value) for v in plan.args.values])
    fns = {
        # the floor under a safe launch: the one driver call with the prebuilt parameter array
        "simt_driver_launch_only": lambda: gpu_launch.launch(plan.compiled, plan.config, handle, params),
        "torch_current_stream": lambda: torch.cuda.current_stream(),
        "safe_simt_torch_tensors": lambda: vector_add(out, x, y),
        "safe_simt_fresh_output": lambda: vector_add(torch.empty_like(x), x, y),
        "safe_simt_ts_tensors": lambda: vector_add(tout, tx, ty),
        "numba_device_arrays_once": lambda: raw[16, 256](do, dx, dy),
        "numba_as_cuda_array_per_call": lambda: raw[16, 256](cuda.as_cuda_array(out), cuda.as_cuda_array(x),
                                                             cuda.as_cuda_array(y)),
        "torch_add_out": lambda: torch.add(x, y, out=out),
        "torch_add_fresh_output": lambda: torch.add(x, y),
    }
    return host_us_side_by_side(fns, calls=1000, repeats=5, warmup=100)


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/h200")
    ap.add_argument("--quick", action="store_true", help="smaller workloads")
    ap.add_argument("--plot", help="render the PNG of an existing JSON and stop")
    ap.add_argument("--host-only", action="store_true", help="print the host µs per eager launch and stop")
    args = ap.parse_args(argv)
    if args.plot:
        print(plot(Path(args.plot)))
        return 0
    import torch
    _raw_kernels()
    if args.host_only:
        print(json.dumps(host_costs(), indent=1))
        return 0
    doc = {"device": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
           "torch": torch.__version__, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results": [], "host_us": {}}
    for name, setup in workloads(args.quick):
        t0 = time.perf_counter()
        rec = run_workload(name, setup)
        rec["wall_s"] = time.perf_counter() - t0
        doc["results"].append(rec)
        print(json.dumps({k: rec.get(k) for k in ("name", "correct", "safe_over_raw", "torch_over_safe", "best_safe",
                                                  "torch_over_best_safe", "best_safe_over_copy_bandwidth",
                                                  "tile_sampler_over_safe")}),
              flush=True)
    doc["host_us"] = host_costs()
    print(json.dumps(doc["host_us"]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"simt-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(path)
    try:
        print(plot(path))
    except ImportError as e:
        print(f"no plot: {e}")
    return 0 if all(all(r["correct"].values()) for r in doc["results"]) else 1


def plot(path: Path) -> Path:
    """Two panels: each example's GPU time relative to torch and to raw numba; host µs per launch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    doc = json.loads(Path(path).read_text())
    recs = doc["results"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["name"] for r in recs]
    xs = range(len(names))
    a.bar([i - 0.2 for i in xs], [r["impls"]["raw"]["ms"] / r["impls"]["safe"]["ms"] if "raw" in r["impls"] else 0
                                  for r in recs], 0.4,
          label="raw numba time / safe SIMT time", color="#7f7f7f")
    a.bar([i + 0.2 for i in xs], [r["torch_over_safe"] for r in recs], 0.4, label="torch time / safe SIMT time",
          color="#1f77b4")
    a.axhline(1.0, color="black", linewidth=0.8)
    a.set_xticks(list(xs))
    a.set_xticklabels(names, rotation=30, ha="right")
    a.set_ylabel("speed of safe SIMT (higher is faster)")
    a.legend(fontsize=7)
    host = doc["host_us"]
    b.barh(list(host), list(host.values()), color="#d62728")
    b.set_xlabel("host µs per eager launch")
    fig.suptitle(f"tilesafe.simt on {doc['device']} ({doc['time']})")
    fig.tight_layout()
    png = Path(path).with_suffix(".png")
    fig.savefig(png, dpi=110)
    return png


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
