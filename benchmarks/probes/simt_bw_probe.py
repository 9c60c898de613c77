"""SIMT bandwidth probe (issue 18): transpose and reductions, raw numba variants beside the safe SIMT
forms, as GB/s and as a fraction of a torch copy (`dst.copy_(src)`) of the same bytes, in one run.

Run on a GPU:  PYTHONPATH=src python benchmarks/probes/simt_bw_probe.py [--out DIR] [--budget-s 75]

Each case is checked against torch before it is timed (CUDA-event medians over loops of launches);
a case that fails (compile error, wrong answer) is reported and the run goes on. Prints a table
and writes DIR/simt_bw_probe.json. Raw kernels are plain `numba.cuda.jit`; the safe ones are
`tilesafe.simt` kernels: the examples, and configurations of the same forms defined below.
"""
import argparse
import functools
import json
import sys
import time
import traceback
from pathlib import Path

import tilesafe as ts
from tilesafe import simt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simt_bench import gpu_ms, raw_pairs, raw_softmax_staged, raw_sum  # noqa: E402  (one timing loop, raw twins)


# -- safe SIMT forms (configurations beside the examples) ---------------------------------------------
@functools.cache
def safe_transpose(tile_dim: int, rows: int, dtype):
    """The example's form for any tile: block (tile_dim, rows), tile_dim // rows elements per thread."""
    K = tile_dim // rows
    T = tile_dim

    @simt.kernel(contract=simt.Contract(block=(T, rows)))
    def transpose_tile(out: simt.Disjoint[dtype, ("C", "R")], x: simt.Ref[dtype, ("R", "C")], R: int, C: int):
        tile = simt.shared((T, T + 1), dtype)
        bx, by = simt.block_id(0), simt.block_id(1)
        for p in tile.permits(simt.chunk(K)):
            tile[p] = x.get((bx * T + p[0], by * T + p[1]), 0.0)
        simt.barrier()
        for p in out.permits(simt.chunk(K)):
            out[p] = tile[p[1] % T, p[0] % T]
    return transpose_tile


@functools.cache
def safe_sum(unroll: int):
    """sum_all with `unroll` scalar reads in flight a thread (session 16's example: 8; now runs of 4)."""
    B = 256
    W = B // 32

    @simt.kernel(contract=simt.Contract(block=(B,)))
    def sum_unrolled(total: simt.Atomic[ts.f32, (1,)], x: simt.Ref[ts.f32, ("N",)], N: int):
        partial = simt.shared((W,), ts.f32)
        stride = simt.grid_dim() * B
        acc = 0.0
        i = simt.global_id()
        while i + (unroll - 1) * stride < N:
            for u in range(unroll):
                acc += x[i + u * stride]
            i += unroll * stride
        while i < N:
            acc += x[i]
            i += stride
        acc = simt.warp_sum(acc)
        for p in partial.permits(simt.per_warp(1)):
            partial[p] = acc
        simt.barrier()
        block_total = simt.warp_sum(partial.get(simt.lane(), 0.0))
        if simt.thread_id() == 0:
            total.add(0, block_total)
    return sum_unrolled


# -- raw numba kernels ---------------------------------------------------------------------------------
@functools.cache
def raw_transpose(tile_dim: int, rows: int, nbtype, loads_first: bool):
    from numba import cuda
    T, R, K = tile_dim, rows, tile_dim // rows
    T1 = T + 1      # numba types a shared shape from literals only

    @cuda.jit
    def transpose_loop(out, x):
        tile = cuda.shared.array((T, T1), nbtype)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        r0, c0 = cuda.blockIdx.x * T, cuda.blockIdx.y * T
        for j in range(K):
            r, c = r0 + ty + j * R, c0 + tx
            if r < x.shape[0] and c < x.shape[1]:
                tile[ty + j * R, tx] = x[r, c]
        cuda.syncthreads()
        for j in range(K):
            r, c = c0 + ty + j * R, r0 + tx
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = tile[tx, ty + j * R]

    @cuda.jit
    def transpose_first(out, x):
        tile = cuda.shared.array((T, T1), nbtype)
        v = cuda.local.array(K, nbtype)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        r0, c0 = cuda.blockIdx.x * T, cuda.blockIdx.y * T
        for j in range(K):
            r, c = r0 + ty + j * R, c0 + tx
            v[j] = x[r, c] if r < x.shape[0] and c < x.shape[1] else nbtype(0)
        for j in range(K):
            tile[ty + j * R, tx] = v[j]
        cuda.syncthreads()
        for j in range(K):
            v[j] = tile[tx, ty + j * R]
        for j in range(K):
            r, c = c0 + ty + j * R, r0 + tx
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = v[j]
    return transpose_first if loads_first else transpose_loop


@functools.cache
def _plain_index():
    """load(a, i, j) / store(a, i, j, v) for 2-D arrays without numba's negative-index wraparound
    (a select per signed index): what a lowering could emit for indices it knows are in bounds."""
    from numba.cuda import cgutils, types
    from numba.cuda.extending import intrinsic

    def pointer(context, builder, aty, ary, idx, ity):
        a = context.make_array(aty)(context, builder, value=ary)
        inds = [context.cast(builder, v, t, types.intp) for v, t in zip(idx, ity)]
        return cgutils.get_item_pointer(context, builder, aty, a, inds, wraparound=False)

    @intrinsic
    def load(typingctx, a, i, j):
        def codegen(context, builder, sig, args):
            return builder.load(pointer(context, builder, sig.args[0], args[0], args[1:], sig.args[1:]))
        return a.dtype(a, i, j), codegen

    @intrinsic
    def store(typingctx, a, i, j, v):
        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[3], sig.args[3], sig.args[0].dtype)
            builder.store(v, pointer(context, builder, sig.args[0], args[0], args[1:3], sig.args[1:3]))
            return context.get_dummy_value()
        return types.void(a, i, j, v), codegen
    return load, store


@functools.cache
def raw_transpose_plain(tile_dim: int, rows: int, nbtype):
    """The loads-first form with every global and shared access through _plain_index."""
    from numba import cuda
    T, R, K = tile_dim, rows, tile_dim // rows
    T1 = T + 1
    load, store = _plain_index()

    @cuda.jit
    def transpose_plain(out, x):
        tile = cuda.shared.array((T, T1), nbtype)
        v = cuda.local.array(K, nbtype)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        r0, c0 = cuda.blockIdx.x * T, cuda.blockIdx.y * T
        for j in range(K):
            r, c = r0 + ty + j * R, c0 + tx
            v[j] = load(x, r, c) if r < x.shape[0] and c < x.shape[1] else nbtype(0)
        for j in range(K):
            store(tile, ty + j * R, tx, v[j])
        cuda.syncthreads()
        for j in range(K):
            v[j] = load(tile, tx, ty + j * R)
        for j in range(K):
            r, c = c0 + ty + j * R, r0 + tx
            if r < out.shape[0] and c < out.shape[1]:
                store(out, r, c, v[j])
    return transpose_plain


@functools.cache
def raw_block_sum(k_const: int, unrolled: bool):
    """block_sum with the slab size a compile-time constant, as the safe K is; `unrolled`: the safe
    example's form (K // 256 reads a thread with a constant trip count, then the rest)."""
    from numba import cuda, float32
    K = k_const
    R = K % 256

    @cuda.jit
    def block_sum_const(out, x):
        partial = cuda.shared.array(8, float32)
        acc = float32(0.0)
        base = cuda.blockIdx.x * K
        if unrolled:
            first = base + cuda.threadIdx.x
            for j in range(K // 256):
                if first + j * 256 < x.shape[0]:
                    acc += x[first + j * 256]
            if R and cuda.threadIdx.x < R and first + K // 256 * 256 < x.shape[0]:
                acc += x[first + K // 256 * 256]
        else:
            for j in range(cuda.threadIdx.x, K, 256):
                if base + j < x.shape[0]:
                    acc += x[base + j]
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
    return block_sum_const


@functools.cache
def safe_pairs(tc: int, rows: int):
    """examples/transpose_half.py's transpose_pairs for any tile: block (tc, rows), 2*tc // rows words a thread."""
    KP = 2 * tc // rows
    TC = tc

    @simt.kernel(contract=simt.Contract(block=(TC, rows)))
    def transpose_pairs_tile(out: simt.Disjoint[ts.i32, ("C", "H")], x: simt.Ref[ts.i32, ("R", "W")],
                             C: int, H: int, R: int, W: int):
        tile = simt.shared((2 * TC, TC + 1), ts.i32)
        bx, by = simt.block_id(0), simt.block_id(1)
        for p in tile.permits(simt.chunk(KP)):
            tile[p] = x.get((bx * 2 * TC + 2 * (p[0] % TC) + p[0] // TC, by * TC + p[1]), 0)
        simt.barrier()
        for p in out.permits(simt.chunk(KP)):
            out[p] = ((tile[p[1] % TC, p[0] % (2 * TC) // 2] >> (16 * (p[0] % 2))) & 0xFFFF) \
                | ((tile[p[1] % TC + TC, p[0] % (2 * TC) // 2] >> (16 * (p[0] % 2))) << 16)
    return transpose_pairs_tile


# -- timing ----------------------------------------------------------------------------------------
class Probe:
    def __init__(self, budget_s: float):
        self.rows, self.deadline = [], time.perf_counter() + budget_s
        self.copy_gbps: dict = {}

    def copy_rate(self, nbytes: int) -> float:
        """GB/s of a torch copy moving `nbytes` in all (read + write)."""
        import torch
        if nbytes not in self.copy_gbps:
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
            dst = torch.empty_like(src)
            self.copy_gbps[nbytes] = nbytes / gpu_ms(lambda: dst.copy_(src)) / 1e6
            del src, dst
        return self.copy_gbps[nbytes]

    def case(self, group: str, name: str, nbytes: int, build, check=None):
        """build() -> the function to time; check() -> None or a message (called after one run)."""
        import torch
        row = {"group": group, "name": name, "bytes": nbytes}
        if time.perf_counter() > self.deadline:
            row["error"] = "skipped: over the time budget"
            self.rows.append(row)
            return
        t0 = time.perf_counter()
        try:
            fn = build()
            fn()
            torch.cuda.synchronize()
            bad = check() if check else None
            if bad:
                row["error"] = f"wrong: {bad}"
            else:
                ms = gpu_ms(fn)
                row["ms"] = ms
                row["gbps"] = nbytes / ms / 1e6
                row["of_copy"] = row["gbps"] / self.copy_rate(nbytes)
        except Exception as e:      # report and go on: the probe must not crash the round
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            traceback.print_exc(limit=3)
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        self.rows.append(row)
        print(json.dumps(row), flush=True)


def transposes(pr: Probe):
    import torch
    from numba import cuda
    from numba.cuda.types import float16, float32

    from tilesafe.simt.examples import transpose as example
    for dtype, tsd, nbt in ((torch.float32, ts.f32, float32), (torch.float16, ts.f16, float16)):
        dn = str(dtype).split(".")[1]
        for r, c in ((8192, 8192), (5000, 3001)):
            x = torch.randn(r, c, device="cuda").to(dtype)
            out = torch.empty(c, r, device="cuda", dtype=dtype)
            want = x.t().contiguous()
            nbytes = 2 * x.numel() * x.element_size()
            group = f"transpose {dn} {r}x{c}"

            def check():
                return None if torch.equal(out, want) else f"max err {(out.float() - want.float()).abs().max().item()}"

            def poisoned(fn):
                out.fill_(float("nan"))
                return fn
            scratch = torch.empty_like(want)
            pr.case(group, "torch .t().contiguous() (as a copy into a buffer)", nbytes,
                    lambda: (lambda: scratch.copy_(x.t())))
            dx, do = cuda.as_cuda_array(x), cuda.as_cuda_array(out)
            for t_dim, rows, first in ((32, 32, False), (32, 8, False), (32, 8, True), (64, 8, True)):
                grid = ((r + t_dim - 1) // t_dim, (c + t_dim - 1) // t_dim)

                def build(t_dim=t_dim, rows=rows, first=first, grid=grid):
                    k = raw_transpose(t_dim, rows, nbt, first)
                    return poisoned(lambda: k[grid, (t_dim, rows)](do, dx))
                pr.case(group, f"raw {t_dim}x{t_dim} tile, block {t_dim}x{rows}"
                               f"{' loads-first' if first else ''}", nbytes, build, check)
            for t_dim in (32, 64):
                grid = ((r + t_dim - 1) // t_dim, (c + t_dim - 1) // t_dim)

                def build_plain(t_dim=t_dim, grid=grid):
                    k = raw_transpose_plain(t_dim, 8, nbt)
                    return poisoned(lambda: k[grid, (t_dim, 8)](do, dx))
                pr.case(group, f"raw {t_dim}x{t_dim} tile, block {t_dim}x8 loads-first, no index wraparound", nbytes,
                        build_plain, check)
            if dtype == torch.float32:
                pr.case(group, "safe example transpose (64x64 tile, block 64x8)", nbytes,
                        lambda: poisoned(lambda: example.transpose(out, x)), check)
            for t_dim, rows in ((32, 8), (64, 8)) if dtype == torch.float16 else ((32, 8),):
                def build(t_dim=t_dim, rows=rows):
                    k = safe_transpose(t_dim, rows, tsd)
                    return poisoned(lambda: k(out, x))
                pr.case(group, f"safe chunk {t_dim}x{t_dim} tile, block {t_dim}x{rows}", nbytes, build, check)
            del x, out, want, dx, do, scratch
            torch.cuda.empty_cache()


def sums(pr: Probe):
    import torch
    from numba import cuda

    from tilesafe.simt.examples import block_sum as example
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    total = torch.zeros(1, device="cuda")
    want = x.double().sum().item()
    dx, dt = cuda.as_cuda_array(x), cuda.as_cuda_array(total)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nbytes = 4 * n     # a reduction reads its bytes; the copy it is compared with moves as many (n/2 each way)
    group = "sum_all f32 268M"

    def check():
        got = total.item()
        return None if abs(got - want) <= 1e-3 * max(1.0, abs(want)) + 1.0 else f"{got} vs {want}"

    pr.case(group, "torch.sum", nbytes, lambda: (lambda: torch.sum(x)))

    def zeroed(fn):
        def run():
            total.zero_()
            fn()
        return run
    for unroll, vec, per_sm in ((4, False, 8), (8, False, 8), (2, True, 8), (4, True, 4), (4, True, 8)):
        def build(unroll=unroll, vec=vec, per_sm=per_sm):
            k = raw_sum(unroll, vec)
            return zeroed(lambda: k[sms * per_sm, 256](dt, dx))
        pr.case(group, f"raw {'float4' if vec else 'scalar'} x{unroll}, {per_sm} blocks/SM", nbytes, build, check)
    pr.case(group, f"safe example sum_all (launch_sum's grid: {example.BLOCKS_PER_SM} blocks/SM)", nbytes,
            lambda: zeroed(lambda: example.launch_sum(total, x)), check)
    for unroll in (8, 16):
        for per_sm in (8, 16):
            def build(unroll=unroll, per_sm=per_sm):
                k = safe_sum(unroll)
                return zeroed(lambda: k.launch(total, x, grid=(sms * per_sm,)))
            pr.case(group, f"safe scalar x{unroll}, {per_sm} blocks/SM", nbytes, build, check)

    k_slab = 4096
    out = torch.empty(n // k_slab, device="cuda")
    do = cuda.as_cuda_array(out)
    want_b = x.view(-1, k_slab).sum(1)
    group = "block_sum f32 268M K=4096"

    def check_b():
        return None if torch.allclose(out, want_b, rtol=1e-3, atol=1e-2) else "block sums differ"
    pr.case(group, "torch.sum(x.view(-1, K), 1)", nbytes, lambda: (lambda: torch.sum(x.view(-1, k_slab), 1)))

    for unrolled in (False, True):
        def build_const(unrolled=unrolled):
            k = raw_block_sum(k_slab, unrolled)
            return lambda: k[n // k_slab, 256](do, dx)
        pr.case(group, f"raw, K a compile-time constant{', unrolled (the safe form)' if unrolled else ''}", nbytes,
                build_const, check_b)
    pr.case(group, "safe example block_sum", nbytes, lambda: (lambda: example.block_sum(out, x, K=k_slab)), check_b)


def sums_at_bench_sizes(pr: Probe):
    """sum_all where the bench runs it (64M f32) and at 268M: the safe example (runs of 4), its raw
    twin (float4), session 16's scalar forms, with and without the `total.zero_()` the bench times
    with them, and the grid. (Session 17 also timed a raw kernel with the safe lowering's read check
    written as an inline device function on a local array: 65% of copy — numba kept that array in
    local memory; the safe lowering's own checked reads ran at 93.8%.)"""
    import torch
    from numba import cuda

    from tilesafe.simt.examples import block_sum as example
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n in (1 << 26, 1 << 28):
        x = torch.randn(n, device="cuda")
        total = torch.zeros(1, device="cuda")
        want = x.double().sum().item()
        dx, dt = cuda.as_cuda_array(x), cuda.as_cuda_array(total)
        nbytes = 4 * n
        group = f"sum_all f32 {n >> 20}M"

        def check():
            got = total.item()
            return None if abs(got - want) <= 1e-3 * max(1.0, abs(want)) + 1.0 else f"{got} vs {want}"

        def zeroed(fn):
            def run():
                total.zero_()
                fn()
            return run

        def once(fn):        # the kernel alone: checked after its first run from zero, then timed accumulating
            total.zero_()
            return fn
        pr.case(group, "torch.sum", nbytes, lambda: (lambda: torch.sum(x)))
        raw8, raw4 = raw_sum(8, False), raw_sum(4, True)
        pr.case(group, "raw scalar x8 16/SM + zero_ (session 16's raw)", nbytes,
                lambda: zeroed(lambda: raw8[sms * 16, 256](dt, dx)), check)
        pr.case(group, "raw float4 x4 16/SM + zero_ (the bench's raw twin)", nbytes,
                lambda: zeroed(lambda: raw4[sms * 16, 256](dt, dx)), check)
        pr.case(group, "raw float4 x4 16/SM, kernel alone", nbytes,
                lambda: once(lambda: raw4[sms * 16, 256](dt, dx)), check)
        pr.case(group, "safe scalar x8 16/SM + zero_ (session 16's example)", nbytes,
                lambda: zeroed(lambda: safe_sum(8).launch(total, x, grid=(sms * 16,))), check)
        pr.case(group, "safe example sum_all (runs of 4) 16/SM + zero_", nbytes,
                lambda: zeroed(lambda: example.launch_sum(total, x, sms * 16)), check)
        pr.case(group, "safe example sum_all 16/SM, kernel alone", nbytes,
                lambda: once(lambda: example.launch_sum(total, x, sms * 16)), check)
        if n == 1 << 26:
            for per_sm in (7, 8, 14, 32):      # 36 registers a thread: 7 blocks of 256 resident an SM
                pr.case(group, f"safe example sum_all {per_sm}/SM + zero_", nbytes,
                        lambda per_sm=per_sm: zeroed(lambda: example.launch_sum(total, x, sms * per_sm)), check)
            for per_sm in (7, 14):
                pr.case(group, f"raw float4 x4 {per_sm}/SM + zero_", nbytes,
                        lambda per_sm=per_sm: zeroed(lambda: raw4[sms * per_sm, 256](dt, dx)), check)
        del x, total
        torch.cuda.empty_cache()


def softmaxes(pr: Probe):
    """Row softmax: the warp-per-row example, the staged one (a block per row, the row in shared
    memory, read once), the staged raw twin, torch.softmax; % of a copy of the same bytes."""
    import torch
    from numba import cuda

    from tilesafe.simt.examples import softmax_rows as example
    for r, c in ((8192, 4096), (4000, 1000)):
        x = torch.randn(r, c, device="cuda")
        out = torch.empty_like(x)
        want = torch.softmax(x, 1)
        nbytes = 2 * 4 * r * c
        group = f"softmax f32 {r}x{c}"
        dx, do = cuda.as_cuda_array(x), cuda.as_cuda_array(out)
        k = -(-c // 256)

        def check():
            return None if torch.allclose(out, want, rtol=1e-5, atol=1e-6) else \
                f"max err {(out - want).abs().max().item()}"

        def poisoned(fn):
            out.fill_(float("nan"))
            return fn
        pr.case(group, "torch.softmax", nbytes, lambda: (lambda: torch.softmax(x, 1)))
        pr.case(group, "safe softmax_rows (a warp a row, x read 3 times)", nbytes,
                lambda: poisoned(lambda: example.softmax_rows(out, x)), check)
        pr.case(group, f"safe softmax_rows_staged K={k} (a block a row, in shared)", nbytes,
                lambda: poisoned(lambda: example.softmax_rows_staged(out, x, K=k)), check)
        raw = raw_softmax_staged(k)
        pr.case(group, f"raw staged twin K={k}", nbytes, lambda: poisoned(lambda: raw[r, 256](do, dx)), check)
        del x, out, want, dx, do
        torch.cuda.empty_cache()


def half_transposes(pr: Probe):
    """16-bit transposes: one half a thread (the example's transpose_halves, raw best form) and pairs of
    halves as int32 words (transpose_pairs, several tiles, and its raw twin)."""
    import torch
    from numba import cuda
    from numba.cuda.types import float16

    from tilesafe.simt.examples import transpose_half as example
    for dtype, r, c in ((torch.float16, 8192, 8192), (torch.float16, 5000, 3002), (torch.bfloat16, 8192, 8192)):
        dn = str(dtype).split(".")[1]
        x = torch.randn(r, c, device="cuda").to(dtype)
        out = torch.empty(c, r, device="cuda", dtype=dtype)
        want = x.t().contiguous()
        nbytes = 2 * x.numel() * x.element_size()
        group = f"transpose {dn} {r}x{c}"
        x32, o32 = x.view(torch.int32), out.view(torch.int32)
        dx32, do32 = cuda.as_cuda_array(x32), cuda.as_cuda_array(o32)

        def check():
            return None if torch.equal(out, want) else f"max err {(out.float() - want.float()).abs().max().item()}"

        def poisoned(fn):
            out.fill_(float("nan"))
            return fn
        scratch = torch.empty_like(want)
        pr.case(group, "torch copy of x.t() into a buffer", nbytes, lambda: (lambda: scratch.copy_(x.t())))
        if dtype == torch.float16:
            dx, do = cuda.as_cuda_array(x), cuda.as_cuda_array(out)
            grid64 = ((r + 63) // 64, (c + 63) // 64)

            def build_plain():
                k = raw_transpose_plain(64, 8, float16)
                return poisoned(lambda: k[grid64, (64, 8)](do, dx))
            pr.case(group, "raw halves 64x64 tile, block 64x8, no wraparound (best raw)", nbytes, build_plain, check)
            pr.case(group, "safe transpose_halves (64x64, 64x8)", nbytes,
                    lambda: poisoned(lambda: example.transpose_halves(out, x)), check)
        pr.case(group, "safe transpose_f16 (the example: pairs 32, block 32x8)", nbytes,
                lambda: poisoned(lambda: example.transpose_f16(out, x)), check)
        for tc, rows in ((64, 8),):
            def build_pairs(tc=tc, rows=rows):
                k = safe_pairs(tc, rows)
                return poisoned(lambda: k(o32, x32))
            pr.case(group, f"safe pairs {tc}, block {tc}x{rows}", nbytes, build_pairs, check)
        for tc, rows in ((32, 8), (64, 8)):
            grid = ((r // 2 + tc - 1) // tc, (c + 2 * tc - 1) // (2 * tc))

            def build_raw(tc=tc, rows=rows, grid=grid):
                k = raw_pairs(tc, rows)
                return poisoned(lambda: k[grid, (tc, rows)](do32, dx32))
            pr.case(group, f"raw pairs {tc}, block {tc}x{rows} (twin)", nbytes, build_raw, check)
        del x, out, want, scratch, x32, o32, dx32, do32
        torch.cuda.empty_cache()


def table(pr: Probe) -> str:
    lines = [f"{'case':58s} {'ms':>8s} {'GB/s':>8s} {'% copy':>7s}"]
    group = None
    for r in pr.rows:
        if r["group"] != group:
            group = r["group"]
            lines.append(f"-- {group} (copy of the same bytes: {pr.copy_gbps.get(r['bytes'], float('nan')):.0f} GB/s)")
        if "error" in r:
            lines.append(f"  {r['name']:56s} {r['error'][:80]}")
        else:
            lines.append(f"  {r['name']:56s} {r['ms']:8.4f} {r['gbps']:8.0f} {100 * r['of_copy']:6.1f}%")
    return "\n".join(lines)


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget-s", type=float, default=75.0)
    ap.add_argument("--only", default=None,
                    help="comma-separated parts: sum, transpose (session 16's), sum64, softmax, half (session 17's)")
    args = ap.parse_args(argv)
    import torch
    pr = Probe(args.budget_s)
    t0 = time.perf_counter()
    parts = {"sum": sums, "transpose": transposes, "sum64": sums_at_bench_sizes, "softmax": softmaxes,
             "half": half_transposes}
    for name in args.only.split(",") if args.only else list(parts):     # in the order given
        try:
            parts[name](pr)
        except Exception:
            traceback.print_exc()
    doc = {"device": torch.cuda.get_device_name(), "wall_s": time.perf_counter() - t0, "rows": pr.rows,
           "copy_gbps": {str(k): v for k, v in pr.copy_gbps.items()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "simt_bw_probe.json").write_text(json.dumps(doc, indent=1))
    print(table(pr))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
