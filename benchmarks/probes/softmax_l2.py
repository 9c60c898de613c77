"""Probe: can the long (vocabulary) softmax's second pass find its input in L2?

The two-kernel softmax reads x twice (statistics, then the normalising pass) and writes y
once. Its 64 x 151936 fp32 logits (39 MB) fit the H200's L2, but the pass's own stores
evict them. Variants of the raw Triton twin with L2 eviction hints: the statistics load
x with evict_last, the pass loads it with evict_first and stores y with evict_first, in
the combinations below. Side by side with torch.softmax and a copy (the bench's timer:
rotated working set, CUDA graphs, median), after a check against torch. JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/softmax_l2.py "$OUT/softmax_l2.json"
"""
import json
import sys

import torch
import triton
import triton.language as tl

from tilesafe.bench.twins.launch import cdiv, launch


@triton.jit
def stats(m_ptr, s_ptr, x_ptr, N, C, PER, BN: tl.constexpr, EVICT: tl.constexpr):
    r, c = tl.program_id(0), tl.program_id(1)
    rn = tl.arange(0, BN)
    m = tl.full((1,), -float("inf"), tl.float32)
    s = tl.zeros((1,), tl.float32)
    for k in range(c * PER, tl.minimum((c + 1) * PER, tl.cdiv(N, BN))):
        cols = k * BN + rn
        t = tl.load(x_ptr + r * N + cols[None, :], mask=cols[None, :] < N, other=-float("inf"),
                    eviction_policy=EVICT)
        m_new = tl.maximum(m, tl.max(t, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(t - m_new[:, None]), axis=1)
        m = m_new
    tl.store(m_ptr + r * C + c + tl.arange(0, 1), m)
    tl.store(s_ptr + r * C + c + tl.arange(0, 1), s)


@triton.jit
def apply(y_ptr, x_ptr, m_ptr, s_ptr, N, C, BN: tl.constexpr, CP: tl.constexpr, LOAD: tl.constexpr,
          STORE: tl.constexpr, CACHE: tl.constexpr, REVERSE: tl.constexpr):
    r, j = tl.program_id(0), tl.program_id(1)
    if REVERSE:
        r, j = tl.num_programs(0) - 1 - r, tl.num_programs(1) - 1 - j
    rc = tl.arange(0, CP)
    mc = tl.load(m_ptr + r * C + rc[None, :], mask=rc[None, :] < C, other=-float("inf"))
    sc = tl.load(s_ptr + r * C + rc[None, :], mask=rc[None, :] < C, other=0.0)
    m = tl.max(mc, axis=1)
    s = tl.sum(tl.where(mc == -float("inf"), 0.0, sc * tl.exp(mc - m[:, None])), axis=1)
    cols = j * BN + tl.arange(0, BN)
    t = tl.load(x_ptr + r * N + cols[None, :], mask=cols[None, :] < N, other=0.0, eviction_policy=LOAD)
    y = tl.exp(t - m[:, None]) / s[:, None]
    tl.store(y_ptr + r * N + cols[None, :], y, mask=cols[None, :] < N, eviction_policy=STORE,
             cache_modifier=CACHE)


class Softmax:
    def __init__(self, m, n, x_evict="", load="", store="", cache="", reverse=True, bn=4096, chunks=19):
        self.bn, self.tiles = bn, cdiv(n, bn)
        self.per = cdiv(self.tiles, chunks)
        self.chunks = cdiv(self.tiles, self.per)
        self.kw = dict(x_evict=x_evict, load=load, store=store, cache=cache, reverse=reverse)
        self.m_ws = torch.empty(m, self.chunks, device="cuda")
        self.s_ws = torch.empty(m, self.chunks, device="cuda")

    def __call__(self, y, x):
        m, n = x.shape
        kw = self.kw
        launch(stats, (m, self.chunks), self.m_ws, self.s_ws, x, n, self.chunks, self.per, BN=self.bn,
               EVICT=kw["x_evict"])
        launch(apply, (m, self.tiles), y, x, self.m_ws, self.s_ws, n, self.chunks, BN=self.bn,
               CP=triton.next_power_of_2(self.chunks), LOAD=kw["load"], STORE=kw["store"], CACHE=kw["cache"],
               REVERSE=kw["reverse"])
        return y


VARIANTS = {
    "twin": {},
    "stats evict_last, pass evict_first": dict(x_evict="evict_last", load="evict_first"),
    "+ y evict_first": dict(x_evict="evict_last", load="evict_first", store="evict_first"),
    "+ y .cs": dict(x_evict="evict_last", load="evict_first", cache=".cs"),
    "stats evict_last, y evict_first": dict(x_evict="evict_last", store="evict_first"),
    "y evict_first only": dict(store="evict_first"),
    "y .cs only": dict(cache=".cs"),
    "all hints, forward pass": dict(x_evict="evict_last", load="evict_first", store="evict_first", reverse=False),
}


def main(out_path):
    from side_by_side import measure, result_check, show
    from tilesafe.bench.timing import rotation_sets
    result = {}
    for (m, n) in [(64, 151936), (32, 151936), (128, 151936)]:
        sets = rotation_sets(m * n * 8)
        xs = [torch.randn(m, n, device="cuda") * 4 for _ in range(sets)]
        ys = [torch.empty(m, n, device="cuda") for _ in range(sets)]
        ref = torch.softmax(xs[0], -1)
        impls = {"torch.softmax": (lambda i: torch.softmax(xs[i], -1), "torch"),
                 "copy": (lambda i: ys[i].copy_(xs[i]), "torch")}
        for key, kw in VARIANTS.items():
            impls[key] = ((lambda f: lambda i: f(ys[i], xs[i]))(Softmax(m, n, **kw)), "torch")
        check = result_check(ys[0], ref, tol=1e-4, error="max", unchecked=("copy", "torch.softmax"))
        entry = result[f"{m}x{n}"] = measure(impls, sets, check, "copy", "vs_copy")
        show(f"{m}x{n} f32", entry, "vs_copy", 40)
        torch.cuda.empty_cache()
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
