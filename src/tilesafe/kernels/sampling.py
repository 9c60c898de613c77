"""`sample`: one token per row of logits, on the device — greedy, temperature, top-k, top-p,
a per-row seed — and the chosen token's log-probability.

One block per row walks the vocabulary in tiles of BV (8192), several times:
  1. the row's maximum, its first index (the greedy token), its smallest finite value and
     Z = sum exp(x - max) at temperature 1 (for the log-probability of the raw logits, what
     vLLM reports) and at T (the row's weight), online, rescaled as the maximum grows;
  2. top-k and top-p as thresholds on the logit: the kept set is {x >= thr}. A threshold is
     found by bisection on the value, each probe one pass that counts (top-k) or weighs (top-p)
     the values >= the probe and snaps it up to the least row value above it, so the result
     is an exact row value and the loop ends once no row value is left between the bounds.
     Each search starts in registers, over pass 1's lane maxima (lane j holds the largest of
     x[j], x[j + BV], ...): the k-th largest lane maximum has k values above it, so it bounds
     the top-k threshold from below, and it is the threshold when exactly k values reach it
     (the top k in k lanes, as usual for a small k) — the kept values are then those lane
     maxima, and top-p after top-k runs on them without a pass; for top-p alone the lanes give
     a lower bound the row search starts from. This replaces a sort: a sort of 150k values
     needs a multi-pass merge across tiles, and a threshold does the job of both filters in a
     few reductions, as several GPU samplers do. Ties at the threshold are all kept (vLLM's
     top-k keeps them too);
  3. the token: inverse CDF in vocabulary order over the kept weights exp((x - max) / T), at
     u * (kept mass), u = ts.rand(seed, step) — a Philox number that depends only on the
     row's seed and step, so a request's tokens do not depend on the batch around it. One
     pass sums the kept weight of each tile; only the tile where the running sum passes the
     target is scanned element by element.

Passes over a row: greedy 1, temperature alone 2, Qwen3's defaults (top-k 20, top-p 0.95)
usually 3, top-p alone 4 plus its bisection probes.

temperature 0 is greedy (the first maximum; no random number is drawn); top_k 0 (or >= V)
and top_p 1 switch those filters off. Nothing leaves the device, and with `out=` and
`logprobs_out=` nothing is allocated: a call can be captured in `ts.graph()`.
"""

import tilesafe as ts

from . import arguments as A
from .call_checks import check_aliasing
from .launch import cdiv, launch, pow2

NEG_INF, POS_INF = -float("inf"), float("inf")
MAX_PROBES = 64          # bisection passes per threshold at most (a row of near-equal values)
# Vocabulary tile: 19 tiles for Qwen3's 151936. One block walks a row many times and each
# tile iteration waits about one L2 round trip, so few wide tiles beat many narrow ones
# (2048 wide: 75 round trips a pass). 8192 over 16 warps: 128 registers (the cap for 512
# threads), no spills (ptxas -v, sm_90a).
BLOCK_V = 8192
# A larger temperature (inf included) samples as 1e30 does: exp((x - max) / 1e30) is 1.0 in f32
# for any finite logit gap below 1e22 (uniform weights, the limit), where a reciprocal of 0
# would make a masked logit's weight exp(-inf * 0) = NaN.
TEMPERATURE_MAX = 1e30


@ts.function
def _tile(x, i, t, BV, V):
    """Vocabulary tile t of row i as (BV,) f32 (padding -inf) and its in-bounds mask."""
    v = ts.reshape(ts.load(x, (i, t), shape=(1, BV), padding=NEG_INF), (BV,)).astype(ts.f32)   # (BV,)
    inb = t * BV + ts.arange(0, BV) < V                                                       # (BV,)
    return v, inb


@ts.function
def _lanes(x, i, nt, BV, V, inv_t, WITH_T):
    """Pass 1, lane-wise (lane j sees x[j], x[j + BV], ...): each lane's maximum, the first
    index of it, sum exp(x - max) and (WITH_T) sum exp((x - max) * inv_t) kept online, and its
    least finite value. One exp per element and sum: exp(-|x - max|) is the new term, or the
    factor that rescales the sum when x is a new maximum (the exp unit is the limit here)."""
    best = ts.full((BV,), NEG_INF, ts.f32)
    at = ts.zeros((BV,), ts.i32)
    z, zt = ts.zeros((BV,), ts.f32), ts.zeros((BV,), ts.f32)
    low = ts.full((BV,), POS_INF, ts.f32)
    cols = ts.arange(0, BV)
    for t in range(nt):
        v, inb = _tile(x, i, t, BV, V)                                     # (BV,)
        up = v > best                                                      # strict: ties keep the first
        finite = v > NEG_INF                                               # (-inf: a padding or masked value)
        gap = ts.where(finite, v, 0.0) - ts.where(best > NEG_INF, best, 0.0)   # no inf - inf; z is 0 while best is -inf
        d = ts.where(finite, -ts.abs(gap), NEG_INF)                        # (BV,) <= 0
        e = ts.exp(d)
        z = ts.where(up, z * e + 1.0, z + e)
        if WITH_T:
            et = ts.exp(d * inv_t)
            zt = ts.where(up, zt * et + 1.0, zt + et)
        at = ts.where(up, t * BV + cols, at)
        best = ts.maximum(best, v)
        low = ts.minimum(low, ts.where(inb & finite, v, POS_INF))
    return best, at, z, zt, low


@ts.function
def _above(x, i, nt, BV, V, probe, m, inv_t, WEIGHTED):
    """Over row i: F(probe) — how many values are >= probe (or, WEIGHTED, their weights
    exp((x - m) * inv_t)) — the least value >= probe and the greatest value < probe."""
    # Lane-wise accumulators, reduced once after the walk: the loop body stays elementwise
    # (a block-wide reduction per tile would cost a barrier each, three per tile).
    total = ts.zeros((BV,), ts.f32)
    least = ts.full((BV,), POS_INF, ts.f32)
    below = ts.full((BV,), NEG_INF, ts.f32)
    for t in range(nt):
        v, inb = _tile(x, i, t, BV, V)                                     # (BV,)
        ge = inb & (v >= probe)
        if WEIGHTED:
            total += ts.where(ge, ts.exp((v - m) * inv_t), 0.0)
        else:
            total += ts.where(ge, 1.0, 0.0)
        least = ts.minimum(least, ts.where(ge, v, POS_INF))
        below = ts.maximum(below, ts.where(inb & (v < probe), v, NEG_INF))
    return ts.sum(total), ts.min(least), ts.max(below)


@ts.function
def _threshold(x, i, nt, BV, V, target, lo, f_lo, hi, m, inv_t, WEIGHTED):
    """The largest value of row i in [lo, hi] whose F (see _above) is >= target, and its F,
    given F(lo) = f_lo >= target and hi the row's maximum."""
    f_hi, _, _ = _above(x, i, nt, BV, V, hi, m, inv_t, WEIGHTED)
    lo = ts.where(f_hi >= target, hi, lo)
    f_lo = ts.where(f_hi >= target, f_hi, f_lo)
    mid = lo * 0.5 + hi * 0.5
    go = (f_hi < target) & (mid > lo) & (mid < hi)
    n = 0
    while go:
        f, least, below = _above(x, i, nt, BV, V, mid, m, inv_t, WEIGHTED)
        ok = f >= target
        lo = ts.where(ok, least, lo)          # a row value, F(least) == f >= target
        f_lo = ts.where(ok, f, f_lo)
        hi = ts.where(ok, hi, mid)            # F(mid) < target: the answer is below mid
        n += 1
        mid = lo * 0.5 + hi * 0.5
        # Stop when no row value lies in (lo, mid) after a miss, or the floats run out.
        go = (n < MAX_PROBES) & (ok | (below > lo)) & (mid > lo) & (mid < hi)
    return lo, f_lo


@ts.function
def _largest_reaching(vals, weights, target, lo, hi):
    """_threshold over a tile in registers: the largest v in [lo, hi] whose elements of vals
    >= v weigh at least target (weights: a tile like vals, or 1.0 to count); lo when none."""
    f_hi = ts.sum(ts.where(vals >= hi, weights, 0.0))
    lo = ts.where(f_hi >= target, hi, lo)
    mid = lo * 0.5 + hi * 0.5
    go = (f_hi < target) & (mid > lo) & (mid < hi)
    n = 0
    while go:
        ge = vals >= mid
        ok = ts.sum(ts.where(ge, weights, 0.0)) >= target
        lo = ts.where(ok, ts.min(ts.where(ge, vals, POS_INF)), lo)
        hi = ts.where(ok, hi, mid)
        below = ts.max(ts.where(vals < mid, vals, NEG_INF))
        n += 1
        mid = lo * 0.5 + hi * 0.5
        go = (n < MAX_PROBES) & (ok | (below > lo)) & (mid > lo) & (mid < hi)
    return lo


@ts.function
def _pick(x, i, nt, BV, V, NTP, thr, m, inv_t, target):
    """The first kept index (x >= thr) whose running weight exceeds target, and its logit.
    One pass sums each tile's kept weight (one reduction a tile); only the tile where the
    running sum passes target is then scanned. If rounding leaves a sum short of target, the
    last kept index of the last tile (or of the tile found) with weight is taken."""
    tiles = ts.arange(0, NTP)                                              # (NTP,)
    mass = ts.zeros((NTP,), ts.f32)                                        # (NTP,) kept weight per tile
    for t in range(nt):
        v, inb = _tile(x, i, t, BV, V)                                     # (BV,)
        w = ts.where(inb & (v >= thr), ts.exp((v - m) * inv_t), 0.0)
        mass = ts.where(tiles == t, ts.sum(w), mass)
    through = ts.cumsum(mass, 0)                                           # (NTP,) weight up to each tile's end
    c = ts.min(ts.where((mass > 0.0) & (through > target), tiles, NTP))
    c = ts.where(c < NTP, c, ts.max(ts.where(mass > 0.0, tiles, 0)))
    before = ts.sum(ts.where(tiles < c, mass, 0.0))
    v, inb = _tile(x, i, c, BV, V)                                         # (BV,) the tile found
    w = ts.where(inb & (v >= thr), ts.exp((v - m) * inv_t), 0.0)
    cols = ts.arange(0, BV)
    j = ts.min(ts.where((w > 0.0) & (ts.cumsum(w, 0) + before > target), cols, BV))
    j = ts.where(j < BV, j, ts.max(ts.where(w > 0.0, cols, 0)))
    return c * BV + j, ts.sum(ts.where(cols == j, v, 0.0))


@ts.kernel
def sample_kernel(tok: ts.Mut[ts.i32, (1,)], logprob: ts.Mut[ts.f32, (1,)], x: ts.Ref["T", ("B", "V")],
                  temperature: ts.Ref[ts.f32, ("B",)], top_k: ts.Ref[ts.i32, ("B",)],
                  top_p: ts.Ref[ts.f32, ("B",)], seed: ts.Ref[ts.i64, ("B",)], step: ts.Ref["TS", ("B",)],
                  T: ts.Const[ts.DType], TS: ts.Const[ts.DType], BV: ts.Const[int], NTP: ts.Const[int], B: int,
                  V: int):
    """Block i: row i of x; NTP is the vocabulary's tile count rounded up to a power of two."""
    i = ts.block_id(0)
    nt = (V + BV - 1) // BV
    temp = ts.scalar(ts.load(temperature, (i,), shape=(1,)))
    k = ts.scalar(ts.load(top_k, (i,), shape=(1,)))
    p = ts.scalar(ts.load(top_p, (i,), shape=(1,)))
    inv_t = 1.0 / ts.where(temp > 0.0, ts.minimum(temp, TEMPERATURE_MAX), 1.0)
    best, at, z, zt, low = _lanes(x, i, 0, BV, V, inv_t, False)           # (BV,) each, before any tile
    if temp > 0.0:                                                         # pass 1
        best, at, z, zt, low = _lanes(x, i, nt, BV, V, inv_t, True)
    else:                                                                  # greedy: no sum at T
        best, at, z, zt, low = _lanes(x, i, nt, BV, V, inv_t, False)
    m = ts.max(best)
    at = ts.min(ts.where(best == m, at, V))                                # the first index of the maximum
    z = ts.sum(z * ts.exp(best - ts.where(m > NEG_INF, m, 0.0)))
    zt = ts.sum(zt * ts.exp((best - ts.where(m > NEG_INF, m, 0.0)) * inv_t))   # the whole row's weight
    low = ts.min(low)
    chosen, xv = at, m                                                     # greedy
    if temp > 0.0:
        thr, kept, lanes = low, ts.zeros((), ts.f32), ts.zeros((), ts.i32)
        if (k > 0) & (k < V):
            # The k-th largest of the lanes' maxima (found in registers) has at least k row
            # values above it, so it bounds the k-th largest value from below; and it is that
            # value when exactly k row values reach it (the top k in k different lanes, as
            # usual for a small k). Otherwise the bisection over the row starts from it.
            kf = k.astype(ts.f32)
            thr = _largest_reaching(best, 1.0, kf, low, m)
            count, _, _ = _above(x, i, nt, BV, V, thr, m, inv_t, False)
            lanes = ts.where(count == kf, 1, 0)
            if count > kf:
                thr, _ = _threshold(x, i, nt, BV, V, kf, thr, count, m, m, inv_t, False)
        if lanes == 1:
            # Exactly the lanes' maxima >= thr are kept, one a lane: top-p needs no pass.
            w = ts.where(best >= thr, ts.exp((best - m) * inv_t), 0.0)      # (BV,) kept lanes' weights
            kept = ts.sum(w)
            if p < 1.0:
                thr = _largest_reaching(best, w, p * kept, thr, m)
                kept = ts.sum(ts.where(best >= thr, w, 0.0))
        else:
            kept = zt                                                      # the mass top-p takes its share of
            if thr > low:                                                  # (top-k moved the threshold)
                kept, _, _ = _above(x, i, nt, BV, V, thr, m, inv_t, True)
            if p < 1.0:
                # The lanes' maxima >= v weigh at most the row's values >= v, so where they
                # reach p * kept the row does too: the search over the row starts there.
                w = ts.where(best >= thr, ts.exp((best - m) * inv_t), 0.0)  # (BV,)
                lo = _largest_reaching(best, w, p * kept, thr, m)
                f_lo, _, _ = _above(x, i, nt, BV, V, lo, m, inv_t, True)
                thr, kept = _threshold(x, i, nt, BV, V, p * kept, lo, f_lo, m, m, inv_t, True)
        u = ts.rand(ts.scalar(ts.load(seed, (i,), shape=(1,))), ts.scalar(ts.load(step, (i,), shape=(1,))))
        chosen, xv = _pick(x, i, nt, BV, V, NTP, thr, m, inv_t, u * kept)
    tok.store(ts.full((1,), chosen, ts.i32))
    logprob.store(ts.full((1,), xv - m - ts.log(z), ts.f32))


def warps(bv: int) -> int:
    """16 elements of a tile per thread (4..16 warps)."""
    return max(4, min(16, bv // 512))


# --- public API -------------------------------------------------------------------------


def sample(logits, temperature, top_k, top_p, seed, step, out=None, logprobs_out=None):
    """Sample one token per row of `logits` (B, V) (f32, bf16 or f16) on the device.

    Per-row device tensors (B,): `temperature` f32 (0: greedy, the first maximum), `top_k`
    i32 (0 or >= V: off), `top_p` f32 in (0, 1] (1: off), `seed` i64 and `step` i32/i64 (the
    random number of row i is `ts.rand(seed[i], step[i])`: the same seed and step give the
    same token whatever the batch). Returns `(tokens, logprobs)`: i32 (B,) token ids and f32
    (B,) log_softmax(logits)[row, token] of the raw logits. `out=` / `logprobs_out=` take
    preallocated outputs (a call inside `ts.graph()` must pass both).
    """
    fn = "sample"
    torch_mode = A.is_torch(logits)
    xt = A.tensor(logits, "logits", fn, differentiable=False)
    dtype = A.dtype_in(xt, A.FLOATS, "logits", fn)
    if xt.ndim != 2 or xt.shape[1] == 0:
        raise A.fail(fn, f"`logits` must be (rows, vocabulary) with a non-empty vocabulary, got shape {xt.shape}",
                     help="pass one row of logits per sequence, e.g. logits.view(-1, vocab_size)")
    b, v = xt.shape
    rows = {"temperature": (temperature, (ts.f32,)), "top_k": (top_k, (ts.i32,)), "top_p": (top_p, (ts.f32,)),
            "seed": (seed, (ts.i64,)), "step": (step, A.INTS)}
    params = {}
    for name, (value, kinds) in rows.items():
        t = params[name] = A.tensor(value, name, fn, differentiable=False)
        A.dtype_in(t, kinds, name, fn)
        if t.shape != (b,):
            raise A.fail(fn, f"`{name}` must have one entry per row of logits, shape ({b},), got {t.shape}",
                         help="keep one parameter tensor per batch size (engine/sampler.py does)")
    device = A.same_device(fn, logits=xt, **params)
    o = A.output(out, (b,), ts.i32, device, torch_mode, fn)
    lo = A.output(logprobs_out, (b,), ts.f32, device, torch_mode, fn, name="logprobs_out")
    check_aliasing(fn, {"logits": xt, **params}, {"out": o.passed, "logprobs_out": lo.passed})
    if b == 0:
        return o.returned, lo.returned
    bv = min(BLOCK_V, pow2(v))
    launch(sample_kernel, {"tok": (o.tensor, (1,)), "logprob": (lo.tensor, (1,))}, cfg={"num_warps": warps(bv)},
           x=xt, BV=bv, NTP=pow2(cdiv(v, bv)), **params)
    return o.returned, lo.returned
