"""Twins of the row kernels: `softmax_kernel`, `rms_norm_kernel`, `layer_norm_kernel` (rows
of (M, N), one (BM, NP) tile per program, NP = next_pow2(N)), the long-row softmax pair
`row_stats_kernel` and `softmax_apply_kernel`, and `rope_kernel` ((tokens, heads, head_dim),
one (BT, BH, HP) tile per program, angles computed in fp32 in the kernel). The softmax twins
take the library's LOG constant: log-softmax, t - max - log(sum), is the same kernels.
"""
import math

import triton
import triton.language as tl

from .launch import cdiv, launch, pdl, pdl_start
from .tiles import load_rows, load_vector, store_rows


@triton.jit
def softmax(y_ptr, x_ptr, M, N, sxm, sym, BM: tl.constexpr, NP: tl.constexpr, EVEN: tl.constexpr,
            LOG: tl.constexpr = False):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, NP)
    t = load_rows(x_ptr, rm, rn, M, N, sxm, EVEN, -float("inf"))
    m = tl.max(t, axis=1, keep_dims=True)                            # (BM, 1)
    e = tl.exp(t - m)                                                # (BM, NP)
    s = tl.sum(e, axis=1, keep_dims=True)
    if LOG:
        r = t - m - tl.log(s)
    else:
        r = e / s
    store_rows(y_ptr, r, rm, rn, M, N, sym, EVEN)


@triton.jit
def chunk_stats(m_ptr, s_ptr, x_ptr, M, N, sxm, C, PER, BM: tl.constexpr, BN: tl.constexpr, EVEN: tl.constexpr,
                PDL: tl.constexpr = False):
    """Rows [i * BM, +BM), column chunk c (PER tiles of BN): the max and sum of exp(x - max)."""
    pdl_start(PDL)                                          # as the tilesafe launch
    i, c = tl.program_id(0), tl.program_id(1)
    rm = i * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    m = tl.full((BM,), -float("inf"), tl.float32)
    s = tl.zeros((BM,), tl.float32)
    for k in range(c * PER, tl.minimum((c + 1) * PER, tl.cdiv(N, BN))):
        t = load_rows(x_ptr, rm, k * BN + rn, M, N, sxm, EVEN, -float("inf"))
        m_new = tl.maximum(m, tl.max(t, axis=1))
        alpha = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
        p = tl.where(m_new[:, None] == -float("inf"), 0.0, tl.exp(t - m_new[:, None]))
        s = s * alpha + tl.sum(p, axis=1)
        m = m_new
    tl.store(m_ptr + rm * C + c, m, mask=rm < M)
    tl.store(s_ptr + rm * C + c, s, mask=rm < M)


@triton.jit
def softmax_apply(y_ptr, x_ptr, m_ptr, s_ptr, M, N, sxm, sym, C, BM: tl.constexpr, BN: tl.constexpr,
                  CP: tl.constexpr, EVEN: tl.constexpr, PDL: tl.constexpr = False, REVERSE: tl.constexpr = False,
                  LOG: tl.constexpr = False):
    pdl_start(PDL)                                          # as the tilesafe launch
    i, j = tl.program_id(0), tl.program_id(1)
    if REVERSE:
        i, j = tl.num_programs(0) - 1 - i, tl.num_programs(1) - 1 - j
    rm = i * BM + tl.arange(0, BM)
    rn = j * BN + tl.arange(0, BN)
    rc = tl.arange(0, CP)
    inside = (rm[:, None] < M) & (rc[None, :] < C)
    mc = tl.load(m_ptr + rm[:, None] * C + rc[None, :], mask=inside, other=-float("inf"))
    sc = tl.load(s_ptr + rm[:, None] * C + rc[None, :], mask=inside, other=0.0)
    m = tl.max(mc, axis=1)
    s = tl.sum(tl.where(mc == -float("inf"), 0.0, sc * tl.exp(mc - m[:, None])), axis=1)
    t = load_rows(x_ptr, rm, rn, M, N, sxm, EVEN, 0.0)
    if LOG:
        r = t - m[:, None] - tl.log(s[:, None])
    else:
        r = tl.exp(t - m[:, None]) / s[:, None]
    store_rows(y_ptr, r, rm, rn, M, N, sym, EVEN)


@triton.jit
def rms_norm(y_ptr, x_ptr, w_ptr, M, N, sxm, sym, eps, BM: tl.constexpr, NP: tl.constexpr, EVEN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, NP)
    t = load_rows(x_ptr, rm, rn, M, N, sxm, EVEN, 0.0)
    w = load_vector(w_ptr, rn, N, EVEN)
    r = tl.rsqrt(tl.sum(t * t, axis=1, keep_dims=True) / N + eps)    # (BM, 1)
    store_rows(y_ptr, t * r * w[None, :], rm, rn, M, N, sym, EVEN)


@triton.jit
def layer_norm(y_ptr, x_ptr, w_ptr, b_ptr, M, N, sxm, sym, eps, BM: tl.constexpr, NP: tl.constexpr,
               EVEN: tl.constexpr, HAS_B: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, NP)
    t = load_rows(x_ptr, rm, rn, M, N, sxm, EVEN, 0.0)
    w = load_vector(w_ptr, rn, N, EVEN)
    if HAS_B:                                               # loaded before the sums, as the library
        b = load_vector(b_ptr, rn, N, EVEN)
    mean = tl.sum(t, axis=1, keep_dims=True) / N                     # (BM, 1)
    d = t - mean
    if not EVEN:
        d = tl.where(rn[None, :] < N, d, 0.0)     # the zero padding past N, centred, would add mean**2
    r = tl.rsqrt(tl.sum(d * d, axis=1, keep_dims=True) / N + eps)    # (BM, 1)
    y = d * r * w[None, :]
    if HAS_B:
        y += b[None, :]
    store_rows(y_ptr, y, rm, rn, M, N, sym, EVEN)


@triton.jit
def rope(y_ptr, x_ptr, pos_ptr, T, H, HALF, sxt, sxh, syt, syh, log2_theta, BT: tl.constexpr, BH: tl.constexpr,
         HP: tl.constexpr, EVEN: tl.constexpr):
    rt = tl.program_id(0) * BT + tl.arange(0, BT)
    rh = tl.program_id(1) * BH + tl.arange(0, BH)
    rd = tl.arange(0, HP)
    inv_freq = tl.exp2(-(rd.to(tl.float32) * 2.0 / (2 * HALF)) * log2_theta)         # (HP,)
    mask = (rt[:, None, None] < T) & (rh[None, :, None] < H) & (rd[None, None, :] < HALF)
    xo = x_ptr + rt[:, None, None] * sxt + rh[None, :, None] * sxh + rd[None, None, :]
    yo = y_ptr + rt[:, None, None] * syt + rh[None, :, None] * syh + rd[None, None, :]
    if EVEN:
        p = tl.load(pos_ptr + rt).to(tl.float32)
        a = tl.load(xo).to(tl.float32)
        b = tl.load(xo + HALF).to(tl.float32)
    else:
        p = tl.load(pos_ptr + rt, mask=rt < T, other=0).to(tl.float32)
        a = tl.load(xo, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(xo + HALF, mask=mask, other=0.0).to(tl.float32)
    angle = p[:, None, None] * inv_freq[None, None, :]                                 # (BT, 1, HP)
    c, s = tl.cos(angle), tl.sin(angle)
    if EVEN:
        tl.store(yo, (a * c - b * s).to(y_ptr.dtype.element_ty))
        tl.store(yo + HALF, (b * c + a * s).to(y_ptr.dtype.element_ty))
    else:
        tl.store(yo, (a * c - b * s).to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(yo + HALF, (b * c + a * s).to(y_ptr.dtype.element_ty), mask=mask)


def softmax_twin(seen):
    """`run(y, x)` for x of shape (M, N) with unit column stride: softmax, or log-softmax where
    the library launch was one (its LOG constant)."""
    if "row_stats_kernel" in seen:
        return _long_softmax_twin(seen)
    facts = seen["softmax_kernel"]
    bm, npow, log = facts.consts["BM"], facts.consts["NP"], facts.consts["LOG"]

    def run(y, x):
        m, n = x.shape
        launch(softmax, (cdiv(m, bm),), y, x, m, n, x.stride(0), y.stride(0), options=facts.options, BM=bm, NP=npow,
               EVEN=m % bm == 0 and n == npow, LOG=log)
        return y
    return run


def _long_softmax_twin(seen):
    """Rows too long for one tile: chunk statistics into a workspace, then the elementwise pass."""
    stats, apply = seen["row_stats_kernel"], seen["softmax_apply_kernel"]
    bm, bn, per, cp = stats.consts["BM"], stats.consts["BN"], stats.scalars["PER"], apply.consts["CP"]
    chunks, log = stats.grid[2], apply.consts["LOG"]      # the statistics are the same for log-softmax
    ws = {}

    def run(y, x):
        import torch
        m, n = x.shape
        key = (m, chunks, x.device)
        if key not in ws:
            ws[key] = torch.empty((2, m, chunks), dtype=torch.float32, device=x.device)
        mx, sm = ws[key]
        even = m % bm == 0 and n % bn == 0
        launch(chunk_stats, (cdiv(m, bm), chunks), mx, sm, x, m, n, x.stride(0), chunks, per,
               options=stats.options, BM=bm, BN=bn, EVEN=even, PDL=pdl(stats))
        launch(softmax_apply, (cdiv(m, bm), cdiv(n, bn)), y, x, mx, sm, m, n, x.stride(0), y.stride(0), chunks,
               options=apply.options, BM=bm, BN=bn, CP=cp, EVEN=even, PDL=pdl(apply),
               REVERSE=bool(apply.reversed_axes), LOG=log)
        return y
    return run


def rms_norm_twin(seen):
    """`run(y, x, w, eps)` for x of shape (M, N) with unit column stride."""
    facts = seen["rms_norm_kernel"]
    bm, npow = facts.consts["BM"], facts.consts["NP"]

    def run(y, x, w, eps):
        m, n = x.shape
        launch(rms_norm, (cdiv(m, bm),), y, x, w, m, n, x.stride(0), y.stride(0), eps, options=facts.options,
               BM=bm, NP=npow, EVEN=m % bm == 0 and n == npow)
        return y
    return run


def layer_norm_twin(seen):
    """`run(y, x, w, b, eps)` for x of shape (M, N) with unit column stride; b is read only if the
    library launch had a bias (HAS_B)."""
    facts = seen["layer_norm_kernel"]
    bm, npow = facts.consts["BM"], facts.consts["NP"]

    def run(y, x, w, b, eps):
        m, n = x.shape
        launch(layer_norm, (cdiv(m, bm),), y, x, w, b, m, n, x.stride(0), y.stride(0), eps, options=facts.options,
               BM=bm, NP=npow, EVEN=m % bm == 0 and n == npow, HAS_B=facts.consts["HAS_B"])
        return y
    return run


def rope_twin(seen):
    """`run(y, x, positions, theta)` for x of shape (tokens, heads, head_dim) with unit last stride."""
    facts = seen["rope_kernel"]
    bt, bh, hp = facts.consts["BT"], facts.consts["BH"], facts.consts["HP"]

    def run(y, x, positions, theta):
        t, h, d = x.shape
        half = d // 2
        launch(rope, (cdiv(t, bt), cdiv(h, bh)), y, x, positions, t, h, half, x.stride(0), x.stride(1),
               y.stride(0), y.stride(1), math.log2(theta), options=facts.options, BT=bt, BH=bh, HP=hp,
               EVEN=t % bt == 0 and h % bh == 0 and half == hp)
        return y
    return run
