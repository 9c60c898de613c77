"""Twins of the attention kernels: `flash_kernel` (prefill, causal or not, GQA) and the
split-sequence decode, as the pair `decode_partial_kernel` + `decode_combine_kernel` or as one
kernel whose last block per KV head combines the splits (`decode_last_kernel`).

Flash: one program per (batch * head, BM query rows), grid (B * H, query tiles). Key tiles
fully inside the keys and left of the diagonal take an unmasked loop, the rest (the ragged
last tile, the diagonal) a masked one; tiles right of the diagonal are never read. Scores
are in log2 units so the exponentials are exp2, and the unmasked loop scales the row max
instead of every score (one FMA per score), as Triton's fused-attention tutorial does.

Decode: one program per (split, KV head), each streaming one contiguous chunk of the cache
with the GQA query heads of its KV head as one (GP >= 16, D) tile, storing the GS real rows
of its unnormalised partial; a second kernel combines the splits per query head, or the
last program of each KV head to draw a ticket (an acquire-release atomic) does. The
structure, tiles and Triton options are those of the tilesafe launches, written by hand.
"""
import torch
import triton
import triton.language as tl

from .launch import cdiv, launch, pdl, pdl_start
from .tma import descriptor_or_tensor

LOG2E = 1.4426950408889634


@triton.jit
def _online_step(q, k, v, m, l, acc, keep, qk_scale, MASKED: tl.constexpr, NEG_SCALE: tl.constexpr):
    s = tl.dot(q, tl.trans(k))                                             # (BM, BN) raw scores
    if MASKED:
        s = tl.where(keep, s * qk_scale, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1, keep_dims=True))           # (BM, 1)
        p = tl.exp2(s - m_new)
    else:
        if NEG_SCALE:
            top = tl.min(s, axis=1, keep_dims=True) * qk_scale
        else:
            top = tl.max(s, axis=1, keep_dims=True) * qk_scale
        m_new = tl.maximum(m, top)
        p = tl.exp2(s * qk_scale - m_new)
    alpha = tl.exp2(m - m_new)
    l = l * alpha + tl.sum(p, axis=1, keep_dims=True)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha)
    return m_new, l, acc


@triton.jit
def flash(o_ptr, q_ptr, k_ptr, v_ptr, H, GROUP, SQ, SK, D, sqz, sqh, sqs, skz, skh, sks, svz, svh, svs, soz, soh,
          sos, qk_scale, CAUSAL: tl.constexpr, NEG_SCALE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
          DP: tl.constexpr, EVEN: tl.constexpr, REVERSE: tl.constexpr):
    zh, i = tl.program_id(0), tl.program_id(1)
    if REVERSE:                                  # longest query tiles first (causal)
        i = tl.num_programs(1) - 1 - i
    zb, h = zh // H, zh % H
    kvh = h // GROUP
    rm = i * BM + tl.arange(0, BM)
    rd = tl.arange(0, DP)
    rn = tl.arange(0, BN)
    q_ptrs = q_ptr + zb * sqz + h * sqh + rm[:, None] * sqs + rd[None, :]
    if EVEN:
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=(rm[:, None] < SQ) & (rd[None, :] < D), other=0.0)
    k_base = k_ptr + zb * skz + kvh * skh
    v_base = v_ptr + zb * svz + kvh * svh
    m = tl.full((BM, 1), -float("inf"), tl.float32)
    l = tl.zeros((BM, 1), tl.float32)
    acc = tl.zeros((BM, DP), tl.float32)
    free = SK // BN                                                          # key tiles needing no mask
    end = tl.cdiv(SK, BN)
    if CAUSAL:
        free = tl.minimum(free, (i * BM) // BN)
        end = tl.minimum(end, tl.cdiv((i + 1) * BM, BN))
    for j in range(0, free):
        cols = j * BN + rn
        if EVEN:
            k = tl.load(k_base + cols[:, None] * sks + rd[None, :])
            v = tl.load(v_base + cols[:, None] * svs + rd[None, :])
        else:
            k = tl.load(k_base + cols[:, None] * sks + rd[None, :], mask=rd[None, :] < D, other=0.0)
            v = tl.load(v_base + cols[:, None] * svs + rd[None, :], mask=rd[None, :] < D, other=0.0)
        m, l, acc = _online_step(q, k, v, m, l, acc, True, qk_scale, False, NEG_SCALE)
    for j in range(free, end):
        cols = j * BN + rn
        inside = (cols[:, None] < SK) & (rd[None, :] < D)
        k = tl.load(k_base + cols[:, None] * sks + rd[None, :], mask=inside, other=0.0)
        v = tl.load(v_base + cols[:, None] * svs + rd[None, :], mask=inside, other=0.0)
        keep = cols[None, :] < SK                                            # (1, BN)
        if CAUSAL:
            keep = keep & (cols[None, :] <= rm[:, None])                     # (BM, BN)
        m, l, acc = _online_step(q, k, v, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    out = (acc / l).to(o_ptr.dtype.element_ty)
    o_ptrs = o_ptr + zb * soz + h * soh + rm[:, None] * sos + rd[None, :]
    if EVEN:
        tl.store(o_ptrs, out)
    else:
        tl.store(o_ptrs, out, mask=(rm[:, None] < SQ) & (rd[None, :] < D))


@triton.jit
def _tile(desc, ptr, row, col, stride, D, R: tl.constexpr, DP: tl.constexpr, TMA: tl.constexpr,
          EVEN_D: tl.constexpr):
    """The (R, DP) tile at element (row, col) of a row-major matrix: one TMA box, or pointers."""
    if TMA:
        t = desc.load([row, col])
    else:
        rr = row + tl.arange(0, R)
        rd = tl.arange(0, DP)
        if EVEN_D:
            t = tl.load(ptr + rr[:, None] * stride + (col + rd)[None, :])
        else:
            t = tl.load(ptr + rr[:, None] * stride + (col + rd)[None, :], mask=rd[None, :] < D, other=0.0)
    return t


@triton.jit
def flash_rows(o_ptr, q_ptr, k_ptr, v_ptr, dq, dk, dv, H, GROUP, SK, D, sqr, skr, svr, QZ, QH, QC, KZ, KH, KC,
               VZ, VH, VC, soz, soh, sos, qk_scale, CAUSAL: tl.constexpr, NEG_SCALE: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, DP: tl.constexpr, EVEN_D: tl.constexpr, Q_TMA: tl.constexpr,
               K_TMA: tl.constexpr, V_TMA: tl.constexpr, REVERSE: tl.constexpr):
    """`flash` with q, k, v as 2-D matrices: (batch z, head h, tile i) is the tile at tile row
    z * XZ + h * XH + i, tile column h * XC of matrix X; sequence lengths divide by the tiles."""
    zh, i = tl.program_id(0), tl.program_id(1)
    if REVERSE:
        i = tl.num_programs(1) - 1 - i
    zb, h = zh // H, zh % H
    kvh = h // GROUP
    q = _tile(dq, q_ptr, (zb * QZ + h * QH + i) * BM, h * QC * DP, sqr, D, BM, DP, Q_TMA, EVEN_D)
    k_row, k_col = (zb * KZ + kvh * KH) * BN, kvh * KC * DP
    v_row, v_col = (zb * VZ + kvh * VH) * BN, kvh * VC * DP
    m = tl.full((BM, 1), -float("inf"), tl.float32)
    l = tl.zeros((BM, 1), tl.float32)
    acc = tl.zeros((BM, DP), tl.float32)
    free = SK // BN
    end = free
    if CAUSAL:
        free = tl.minimum(free, (i * BM) // BN)
        end = tl.minimum(end, tl.cdiv((i + 1) * BM, BN))
    for j in range(0, free):
        k = _tile(dk, k_ptr, k_row + j * BN, k_col, skr, D, BN, DP, K_TMA, EVEN_D)
        v = _tile(dv, v_ptr, v_row + j * BN, v_col, svr, D, BN, DP, V_TMA, EVEN_D)
        m, l, acc = _online_step(q, k, v, m, l, acc, True, qk_scale, False, NEG_SCALE)
    rm = i * BM + tl.arange(0, BM)
    for j in range(free, end):                                               # the diagonal
        k = _tile(dk, k_ptr, k_row + j * BN, k_col, skr, D, BN, DP, K_TMA, EVEN_D)
        v = _tile(dv, v_ptr, v_row + j * BN, v_col, svr, D, BN, DP, V_TMA, EVEN_D)
        keep = (j * BN + tl.arange(0, BN))[None, :] <= rm[:, None]          # (BM, BN)
        m, l, acc = _online_step(q, k, v, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    rd = tl.arange(0, DP)
    o_ptrs = o_ptr + zb * soz + h * soh + rm[:, None] * sos + rd[None, :]
    if EVEN_D:
        tl.store(o_ptrs, (acc / l).to(o_ptr.dtype.element_ty))
    else:
        tl.store(o_ptrs, (acc / l).to(o_ptr.dtype.element_ty), mask=rd[None, :] < D)


@triton.jit
def _cache_tile(desc, base, j, head_row, head_col, stride, D, BN: tl.constexpr, DP: tl.constexpr,
                TMA: tl.constexpr, EVEN_D: tl.constexpr):
    """Key tile j of one KV head's cache: in the descriptor's matrix the head starts at
    (head_row, head_col); through pointers, at `base`."""
    if TMA:
        t = _tile(desc, base, head_row + j * BN, head_col, stride, D, BN, DP, True, EVEN_D)
    else:
        t = _tile(desc, base, j * BN, 0, stride, D, BN, DP, False, EVEN_D)
    return t


@triton.jit
def decode_partial(acc_ptr, m_ptr, l_ptr, q_ptr, k_ptr, v_ptr, dk, dv, lens_ptr, G, D, MAXS, R, skh, sks, svh, svs,
                   KHR, KHC, VHR, VHC, qk_scale, NEG_SCALE: tl.constexpr, GP: tl.constexpr, GS: tl.constexpr,
                   BN: tl.constexpr, DP: tl.constexpr, EVEN: tl.constexpr, K_TMA: tl.constexpr,
                   V_TMA: tl.constexpr, PDL: tl.constexpr = False, o_ptr=None, count_ptr=None,
                   LAST: tl.constexpr = False):
    """Program (split, KV head): the GP >= 16 query rows of its group (zeros past G) over its
    contiguous chunk of keys; the first GS rows of the partial are stored. With X_TMA the
    cache is read through a host-built descriptor of its (RX, CX) matrix, KV head h starting at
    (h * XHR, h * XHC); otherwise through pointers and strides."""
    pdl_start(PDL)                                          # as the tilesafe launch
    s_id, kvh = tl.program_id(0), tl.program_id(1)
    splits = tl.num_programs(0)
    length = tl.maximum(tl.minimum(tl.load(lens_ptr).to(tl.int32), MAXS), 0)
    per = ((length + splits - 1) // splits + BN - 1) // BN * BN         # keys per split, a multiple of BN
    start = s_id * per
    stop = tl.minimum(length, start + per)
    rg = tl.arange(0, GP)
    rd = tl.arange(0, DP)
    rn = tl.arange(0, BN)
    if EVEN:                                                # D == DP: rows masked only, vector loads
        q = tl.load(q_ptr + (kvh * G + rg[:, None]) * D + rd[None, :], mask=rg[:, None] < G, other=0.0)
    else:
        q = tl.load(q_ptr + (kvh * G + rg[:, None]) * D + rd[None, :], mask=(rg[:, None] < G) & (rd[None, :] < D),
                    other=0.0)
    m = tl.full((GP, 1), -float("inf"), tl.float32)
    l = tl.zeros((GP, 1), tl.float32)
    acc = tl.zeros((GP, DP), tl.float32)
    k_base = k_ptr + kvh * skh
    v_base = v_ptr + kvh * svh
    first = start // BN
    full = stop // BN
    for j in range(first, full):                                            # whole tiles of keys
        k = _cache_tile(dk, k_base, j, kvh * KHR, kvh * KHC, sks, D, BN, DP, K_TMA, EVEN)
        v = _cache_tile(dv, v_base, j, kvh * VHR, kvh * VHC, svs, D, BN, DP, V_TMA, EVEN)
        m, l, acc = _online_step(q, k, v, m, l, acc, True, qk_scale, False, NEG_SCALE)
    for j in range(tl.maximum(first, full), tl.cdiv(stop, BN)):            # the ragged last tile
        cols = j * BN + rn
        if K_TMA and V_TMA:                                 # whole boxes, as the library: rows past
            k = _cache_tile(dk, k_base, j, kvh * KHR, kvh * KHC, sks, D, BN, DP, True, EVEN)   # the length
            v = _cache_tile(dv, v_base, j, kvh * VHR, kvh * VHC, svs, D, BN, DP, True, EVEN)   # are zeroed
            v = tl.where(cols[:, None] < stop, v, 0.0)
        else:
            inside = (cols[:, None] < stop) & (rd[None, :] < D)
            k = tl.load(k_base + cols[:, None] * sks + rd[None, :], mask=inside, other=0.0)
            v = tl.load(v_base + cols[:, None] * svs + rd[None, :], mask=inside, other=0.0)
        m, l, acc = _online_step(q, k, v, m, l, acc, cols[None, :] < stop, qk_scale, True, NEG_SCALE)
    row = s_id * R + kvh * GS + rg                                          # (GP,) rows of the workspace
    keep = rg < GS
    if EVEN:
        tl.store(acc_ptr + row[:, None] * D + rd[None, :], acc, mask=keep[:, None])
    else:
        tl.store(acc_ptr + row[:, None] * D + rd[None, :], acc, mask=keep[:, None] & (rd[None, :] < D))
    tl.store(m_ptr + row, tl.reshape(m, (GP,)), mask=keep)
    tl.store(l_ptr + row, tl.reshape(l, (GP,)), mask=keep)
    if LAST:
        _combine_if_last(o_ptr, acc_ptr, m_ptr, l_ptr, count_ptr + kvh, kvh, splits, G, R, D, GS, DP)


@triton.jit
def _combine_if_last(o_ptr, acc_ptr, m_ptr, l_ptr, slot, kvh, splits, G, R, D, GS: tl.constexpr, DP: tl.constexpr):
    """The KV head's last program to take a ticket combines every split's partial into o."""
    tl.debug_barrier()
    ticket = tl.atomic_add(slot, 1, sem="acq_rel", scope="gpu")
    last = ticket == splits - 1
    tl.store(slot, 0, mask=last)                                            # ready for the next launch
    if last:
        rs = tl.arange(0, GS)
        rd = tl.arange(0, DP)
        top = tl.full((GS, 1), -float("inf"), tl.float32)
        l = tl.zeros((GS, 1), tl.float32)
        acc = tl.zeros((GS, DP), tl.float32)
        for s in range(0, splits):
            row = s * R + kvh * GS + rs
            ms = tl.reshape(tl.load(m_ptr + row, cache_modifier=".cg"), (GS, 1))
            ls = tl.reshape(tl.load(l_ptr + row, cache_modifier=".cg"), (GS, 1))
            a = tl.load(acc_ptr + row[:, None] * D + rd[None, :], mask=rd[None, :] < D, other=0.0,
                        cache_modifier=".cg")
            new = tl.maximum(top, ms)
            keep = tl.where(top == -float("inf"), 0.0, tl.exp2(top - new))   # empty splits weigh 0
            w = tl.where(ms == -float("inf"), 0.0, tl.exp2(ms - new))
            l = l * keep + ls * w
            acc = acc * keep + a * w
            top = new
        o = acc / l
        tl.store(o_ptr + (kvh * G + rs[:, None]) * D + rd[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=(rs[:, None] < G) & (rd[None, :] < D))


@triton.jit
def decode_combine(o_ptr, acc_ptr, m_ptr, l_ptr, S, R, D, G: tl.constexpr, GS: tl.constexpr, SP: tl.constexpr,
                   DP: tl.constexpr, PDL: tl.constexpr = False):
    pdl_start(PDL)                                          # as the tilesafe launch
    h = tl.program_id(0)
    row = (h // G) * GS + h % G                                              # this head's row in the partials
    rs = tl.arange(0, SP)
    rd = tl.arange(0, DP)
    m = tl.load(m_ptr + rs * R + row, mask=rs < S, other=-float("inf"))     # (SP,)
    l = tl.load(l_ptr + rs * R + row, mask=rs < S, other=0.0)
    acc = tl.load(acc_ptr + (rs[:, None] * R + row) * D + rd[None, :], mask=(rs[:, None] < S) & (rd[None, :] < D),
                  other=0.0)                                                 # (SP, DP)
    w = tl.where(m == -float("inf"), 0.0, tl.exp2(m - tl.max(m, axis=0)))  # empty splits weigh 0
    o = tl.sum(w[:, None] * acc, axis=0) / tl.sum(w * l, axis=0)
    tl.store(o_ptr + h * D + rd, o.to(o_ptr.dtype.element_ty), mask=rd < D)


def flash_twin(seen, causal: bool, scale: float):
    """`run(o, q, k, v)` for (B, H, S, D) tensors with unit last stride (k, v may have fewer heads),
    as the tilesafe launch in `seen` ran: 2-D matrices (through TMA where it used TMA) or 4-D."""
    if "flash_rows_kernel" in seen:
        return _flash_rows_twin(seen["flash_rows_kernel"], causal, scale)
    facts = seen["flash_kernel"]
    bm, bn, dp = facts.consts["BM"], facts.consts["BN"], facts.consts["DP"]

    def run(o, q, k, v):
        zb, h, sq, d = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        launch(flash, (zb * h, cdiv(sq, bm)), o, q, k, v, h, h // hkv, sq, sk, d, *q.stride()[:3], *k.stride()[:3],
               *v.stride()[:3], *o.stride()[:3], scale * LOG2E, options=facts.options, CAUSAL=causal,
               NEG_SCALE=scale < 0, BM=bm, BN=bn, DP=dp, EVEN=sq % bm == 0 and d == dp,
               REVERSE=1 in facts.reversed_axes)
        return o
    return run


def _matrix(t, rows: int, dp: int):
    """(B, H, S, D) `t` as one row-major matrix whose (batch, head) blocks of `rows` positions
    are whole tiles: (matrix, XZ, XH, XC) in tiles, heads one under another or side by side."""
    zb, hx, s, d = t.shape
    sz, sh, ss, _ = t.stride()
    n = s // rows
    if (hx == 1 or sh == s * ss) and (zb == 1 or sz == hx * s * ss) and ss >= d:
        return t.as_strided((zb * hx * s, d), (ss, 1)), hx * n, n, 0
    assert d == dp and (hx == 1 or sh == d) and (zb == 1 or sz == s * ss), "not a layout the library reads as rows"
    return t.as_strided((zb * s, hx * d), (ss, 1)), n, 0, 1


def _flash_rows_twin(facts, causal: bool, scale: float):
    bm, bn, dp = facts.consts["BM"], facts.consts["BN"], facts.consts["DP"]
    tma = dict(Q_TMA="q" in facts.tma, K_TMA="k" in facts.tma, V_TMA="v" in facts.tma)

    def run(o, q, k, v):
        zb, h, sq, d = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        (qm, *qx), (km, *kx), (vm, *vx) = _matrix(q, bm, dp), _matrix(k, bn, dp), _matrix(v, bn, dp)
        dq, dk, dv = (descriptor_or_tensor(x, *x.shape, x.stride(0), (rows, dp), tma[f"{n}_TMA"])
                      for x, rows, n in ((qm, bm, "Q"), (km, bn, "K"), (vm, bn, "V")))
        launch(flash_rows, (zb * h, cdiv(sq, bm)), o, qm, km, vm, dq, dk, dv, h, h // hkv, sk, d, qm.stride(0),
               km.stride(0), vm.stride(0), *qx, *kx, *vx, *o.stride()[:3], scale * LOG2E,
               options=facts.options, CAUSAL=causal, NEG_SCALE=scale < 0, BM=bm, BN=bn, DP=dp, EVEN_D=d == dp,
               REVERSE=1 in facts.reversed_axes, **tma)
        return o
    return run


def decode_twin(seen, scale: float):
    """`(workspace(q), run(o, q, k_cache, v_cache, lens, ws))`: the split-sequence decode pair
    or single kernel, reading the caches through TMA where the tilesafe launch did
    (`decode_rows_kernel`, `decode_rows_last_kernel`)."""
    names = ("decode_rows_kernel", "decode_partial_kernel", "decode_rows_last_kernel", "decode_last_kernel")
    name = next(n for n in names if n in seen)
    part, comb, last = seen[name], seen.get("decode_combine_kernel"), "last" in name
    gp, gs, bn, dp = part.consts["GP"], part.consts["GS"], part.consts["BN"], part.consts["DP"]
    splits, hkv = part.grid[0], part.grid[1]
    tma = dict(K_TMA="k" in part.tma, V_TMA="v" in part.tma)

    def workspace(q):
        d, rows = q.shape[1], hkv * gs
        f32 = dict(dtype=torch.float32, device=q.device)
        count = torch.zeros(hkv, dtype=torch.int32, device=q.device)              # tickets, zero at rest
        return (torch.empty(splits, rows, d, **f32), torch.empty(splits, rows, **f32), torch.empty(splits, rows, **f32),
                count)

    def run(o, q, k, v, lens, ws):
        h, d = q.shape
        maxs = k.shape[1]
        acc, m, l, count = ws
        mats = []
        for c in (k, v):   # the cache as one matrix: heads one under another, or side by side
            if c.stride(0) == maxs * c.stride(1):
                mats += [c.shape[0] * maxs, d, maxs, 0]
            else:
                mats += [maxs, c.shape[0] * d, 0, d]
        rk, ck, khr, khc, rv, cv, vhr, vhc = mats
        dk = descriptor_or_tensor(k, rk, ck, k.stride(1), (bn, dp), tma["K_TMA"])
        dv = descriptor_or_tensor(v, rv, cv, v.stride(1), (bn, dp), tma["V_TMA"])
        launch(decode_partial, (splits, hkv), acc, m, l, q, k, v, dk, dv, lens, h // hkv, d, maxs, hkv * gs,
               k.stride(0), k.stride(1), v.stride(0), v.stride(1), khr, khc, vhr, vhc, scale * LOG2E,
               options=part.options, NEG_SCALE=scale < 0, GP=gp, GS=gs, BN=bn, DP=dp, EVEN=d == dp, **tma,
               PDL=pdl(part), o_ptr=o, count_ptr=count, LAST=last)
        if last:
            return o
        launch(decode_combine, (h,), o, acc, m, l, splits, hkv * gs, d, options=comb.options, G=comb.consts["G"],
               GS=gs, SP=comb.consts["SP"], DP=dp, PDL=pdl(comb))
        return o
    return (workspace, run)
