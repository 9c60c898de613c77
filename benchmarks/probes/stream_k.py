"""Probe: does a stream-K GEMM (raw Triton) close the wave-quantization gap to cuBLAS?

Stream-K: a persistent grid of W workers splits the K iterations of all output tiles
evenly, so every SM does the same work; a tile whose iterations two or more workers share
is finished by the last of them to arrive (an acq_rel ticket per tile), which sums the
others' fp32 partials from a workspace. `DP` tiles first run whole (data parallel), the
rest stream-K ("DP + SK" hybrid).

For the GEMM shapes below 90% of cuBLAS: cuBLAS (F.linear), tilesafe's library call and
stream-K variants, side by side (the bench's timer: rotated working set, CUDA graphs, median),
after a check against torch. Prints a table; JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/stream_k.py "$OUT/stream_k.json"
"""
import json
import sys

import torch
import triton
import triton.language as tl

from tilesafe.bench.twins.launch import cdiv, launch
from tilesafe.bench.twins.tma import descriptor_or_tensor


@triton.jit
def _coords(t, tiles_m, tiles_n, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
    per_group = GROUP * tiles_n                       # GROUP rows of tiles, column by column
    first = (t // per_group) * GROUP
    rows = tl.minimum(tiles_m - first, GROUP)
    within = t % per_group
    return (first + within % rows) * BM, (within // rows) * BN


@triton.jit
def _product(a, b, a_ptr, b_ptr, m0, n0, K, lo, hi, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             TMA: tl.constexpr):
    """a[m0:, K tiles lo..hi) @ w[n0:, same].T in fp32; w is (N, K) row-major; sizes divide tiles."""
    acc = tl.zeros((BM, BN), tl.float32)
    rm, rn, rk = m0 + tl.arange(0, BM), n0 + tl.arange(0, BN), tl.arange(0, BK)
    for k in range(lo, hi):
        if TMA:
            ta = a.load([m0, k * BK])
            tb = tl.trans(b.load([n0, k * BK]))
        else:
            ta = tl.load(a_ptr + rm[:, None] * K + (k * BK + rk)[None, :])
            tb = tl.load(b_ptr + rn[None, :] * K + (k * BK + rk)[:, None])
        acc = tl.dot(ta, tb, acc)
    return acc


@triton.jit
def _store(c_ptr, acc, m0, n0, N, BM: tl.constexpr, BN: tl.constexpr):
    rm, rn = m0 + tl.arange(0, BM), n0 + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def stream_k(c_ptr, a_ptr, b_ptr, a, b, ws_ptr, cnt_ptr, M, N, K, DP, PER, BM: tl.constexpr, BN: tl.constexpr,
             BK: tl.constexpr, GROUP: tl.constexpr, TMA: tl.constexpr):
    pid, workers = tl.program_id(0), tl.num_programs(0)
    tiles_m, tiles_n, iters = tl.cdiv(M, BM), tl.cdiv(N, BN), tl.cdiv(K, BK)
    for t in range(pid, DP, workers):                 # whole tiles
        m0, n0 = _coords(t, tiles_m, tiles_n, BM, BN, GROUP)
        _store(c_ptr, _product(a, b, a_ptr, b_ptr, m0, n0, K, 0, iters, BM, BN, BK, TMA), m0, n0, N, BM, BN)
    total = (tiles_m * tiles_n - DP) * iters          # stream-K: iterations [lo, hi) of the rest
    lo = pid * PER
    hi = tl.minimum(lo + PER, total)
    first = lo // iters
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    for u in range(first, tl.cdiv(hi, iters)):
        k0 = tl.maximum(lo, u * iters) - u * iters
        k1 = tl.minimum(hi, (u + 1) * iters) - u * iters
        m0, n0 = _coords(DP + u, tiles_m, tiles_n, BM, BN, GROUP)
        acc = _product(a, b, a_ptr, b_ptr, m0, n0, K, k0, k1, BM, BN, BK, TMA)
        w0 = (u * iters) // PER                        # the workers sharing tile u
        w1 = ((u + 1) * iters - 1) // PER
        if w0 == w1:
            _store(c_ptr, acc, m0, n0, N, BM, BN)
        else:
            slot = pid * 2 + (u != first).to(tl.int32)  # a worker's first piece, or its last
            tl.store(ws_ptr + slot * (BM * BN) + offs, acc)
            tl.debug_barrier()
            ticket = tl.atomic_add(cnt_ptr + u, 1, sem="acq_rel", scope="gpu")
            if ticket == w1 - w0:
                tl.store(cnt_ptr + u, 0)               # reset for the next launch
                acc = tl.zeros((BM, BN), tl.float32)
                for w in range(w0, w1 + 1):              # fixed order: the same sum whoever is last
                    s = w * 2 + (u != (w * PER) // iters).to(tl.int32)
                    acc += tl.load(ws_ptr + s * (BM * BN) + offs, cache_modifier=".cg")
                _store(c_ptr, acc, m0, n0, N, BM, BN)


class StreamK:
    """c = a @ w.T by stream-K with `workers` persistent programs; `dp` whole-tile rounds
    ("auto": all but the last one or two waves' worth of tiles)."""

    def __init__(self, m, n, k, tiles, workers, dp="auto", tma=True, options=None, group=8):
        self.bm, self.bn, self.bk = tiles
        self.workers, self.tma, self.options, self.group = workers, tma, options or {}, group
        count = cdiv(m, self.bm) * cdiv(n, self.bn)
        if dp == "auto":
            dp = max(0, count // workers - 1) * workers if count % workers else count
        self.dp = dp
        self.per = max(1, cdiv((count - dp) * cdiv(k, self.bk), workers))
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.ws = torch.empty(workers * 2 * self.bm * self.bn, dtype=torch.float32, device=dev)
        self.cnt = torch.zeros(max(1, count), dtype=torch.int32, device=dev)

    def __call__(self, c, a, w):
        (m, k), n = a.shape, w.shape[0]
        da = descriptor_or_tensor(a, m, k, k, (self.bm, self.bk), self.tma)
        db = descriptor_or_tensor(w, n, k, k, (self.bn, self.bk), self.tma)
        launch(stream_k, (self.workers,), c, a, w, da, db, self.ws, self.cnt, m, n, k, self.dp, self.per,
               options=self.options, BM=self.bm, BN=self.bn, BK=self.bk, GROUP=self.group, TMA=self.tma)
        return c


class Twin:
    """The persistent twin (`mm_persistent`, grouped order, TMA operands) with the same tiles."""

    def __init__(self, m, n, k, tiles, workers, options):
        self.tiles, self.grid, self.options = tiles, (min(workers, cdiv(m, tiles[0]) * cdiv(n, tiles[1])),), options

    def __call__(self, c, a, w):
        from tilesafe.bench.twins.matmul import mm_persistent
        (m, k), n = a.shape, w.shape[0]
        bm, bn, bk = self.tiles
        da = descriptor_or_tensor(a, m, k, k, (bm, bk), True)
        db = descriptor_or_tensor(w, n, k, k, (bn, bk), True)
        launch(mm_persistent, self.grid, c, a, w.T, c, da, db, m, n, k, k, 1, 1, k, n, 1, options=self.options,
               BM=bm, BN=bn, BK=bk, GROUP=8, EVEN_M=True, EVEN_N=True, EVEN_K=True, TF32=False, A_TMA=True,
               B_TMA=True, B_COLS=True, C_TMA=False)
        return c


SHAPES = {   # name: (M, N, K)
    "4B o M=2048": (2048, 2560, 4096), "4B down M=2048": (2048, 2560, 9728),
    "32B o M=2048": (2048, 5120, 8192),
    "32B qkv M=128": (128, 10240, 5120), "32B o M=128": (128, 5120, 8192),
    "4B qkv M=128": (128, 6144, 2560), "1024^3": (1024, 1024, 1024),
}
BIG = [((128, 256, 64), dict(num_warps=8, num_stages=3)), ((128, 128, 64), dict(num_warps=4, num_stages=4)),
       ((128, 128, 64), dict(num_warps=8, num_stages=4))]
SMALL = [((128, 64, 64), dict(num_warps=4, num_stages=8)), ((128, 128, 64), dict(num_warps=4, num_stages=4)),
         ((64, 128, 64), dict(num_warps=4, num_stages=6)), ((128, 64, 128), dict(num_warps=4, num_stages=4))]


def variants(m, n, k, sms):
    out = {}
    for tiles, opts in (BIG if m >= 1024 else SMALL):
        if m % tiles[0] or n % tiles[1] or k % tiles[2]:
            continue
        tag = "x".join(map(str, tiles)) + f"w{opts['num_warps']}s{opts['num_stages']}"
        out[f"dp-only {tag}"] = StreamK(m, n, k, tiles, sms, dp=cdiv(m, tiles[0]) * cdiv(n, tiles[1]), options=opts)
        out[f"twin {tag}"] = Twin(m, n, k, tiles, sms, opts)
        for dp in ("auto", 0):
            key = f"sk {tag} dp={'auto' if dp == 'auto' else 0}"
            out[key] = StreamK(m, n, k, tiles, sms, dp, options=opts)
            if dp == "auto" and out[key].dp == 0:
                break
    return out


def main(out_path):
    import tilesafe as ts
    import tilesafe.kernels  # noqa: F401
    from side_by_side import measure, result_check
    from tilesafe.bench.timing import rotation_sets
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, result = [], {}
    for name, (m, n, k) in SHAPES.items():
        sets = rotation_sets((m * k + n * k + m * n) * 2)
        xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(sets)]
        cs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        ref = torch.nn.functional.linear(xs[0].float(), ws[0].float())
        impls = {"cublas": (lambda i: torch.nn.functional.linear(xs[i], ws[i], out=cs[i]), "torch"),
                 "tilesafe": (lambda i: ts.kernels.linear(xs[i], ws[i], out=cs[i]), "tilesafe")}
        for key, sk in variants(m, n, k, sms).items():
            impls[key] = ((lambda f: lambda i: f(cs[i], xs[i], ws[i]))(sk), "torch")
        check = result_check(cs[0], ref, error="max", runs=2)    # twice: the counters must be back at zero
        entry = result[name] = measure(impls, sets, check, "cublas", "vs_cublas")
        base = entry["cublas"]["us"]
        best = max((v["vs_cublas"], key) for key, v in entry.items() if key.startswith("sk") and "us" in v) \
            if any(key.startswith("sk") and "us" in v for key, v in entry.items()) else (0, "-")
        rows.append((name, base, entry.get("tilesafe", {}).get("vs_cublas", 0), best[0], best[1]))
        print(name, json.dumps(entry), flush=True)
        torch.cuda.empty_cache()
    json.dump({"sms": sms, "shapes": result}, open(out_path, "w"), indent=1)
    print(f"\n{'shape':18} {'cuBLAS us':>9} {'tilesafe':>8} {'best SK':>8}  variant")
    for name, base, tsr, skr, key in rows:
        print(f"{name:18} {base:9.2f} {tsr:8.3f} {skr:8.3f}  {key}")


if __name__ == "__main__":
    main(sys.argv[1])
