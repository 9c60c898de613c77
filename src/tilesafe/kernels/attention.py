"""Attention: `flash_attention` (prefill, causal or not) and `decode_attention` (one query
per head over a KV cache, split over the sequence), both with grouped-query attention.

Flash attention: each block owns BM query rows of one (batch, head) and streams K and V
in tiles of BN keys with the online softmax (running max `m`, sum `l`, accumulator), the
structure of Triton's fused-attention tutorial. Key tiles entirely inside the sequence
and, when causal, entirely left of the diagonal need no mask and take the first loop; the
rest (the ragged last tile, the diagonal) take a second, masked loop; tiles right of the
diagonal are never visited. Scores are in log2 units (scale * log2(e)) so the exponentials
are `exp2`; the unmasked loop takes the row max of the raw scores and scales that, so each
score costs one FMA before its exp2. Statistics are fp32; p is rounded to V's dtype for the
second product. When the sequence lengths divide by the tiles and the layouts allow it,
q, k and v are read as 2-D matrices (`flash_rows_kernel`: each tile one box of a matrix,
so Hopper loads it with TMA), else as 4-D tensors (`flash_kernel`).

Decode attention: one block per (split, KV head), each streaming one contiguous chunk of
the cache (a whole number of key tiles; enough splits that (KV heads x splits) fills the
GPU). It loads the GROUP query heads that share its KV head as one (GP, D) tile (GP >= 16
rows for the tensor cores, padding rows are zeros), so K and V are read once per KV head,
and writes an unnormalised partial (acc, max, sum) for the GS = pow2(GROUP) rows that hold
real heads; a second kernel combines the splits per query head. The sequence length can
live in a device tensor, so a captured CUDA graph replays for every new token.
"""
import math
from dataclasses import dataclass

import tilesafe as ts

from . import arguments as A
from . import configs, layout
from .attention_model import decode_tiling
from .call_checks import check_aliasing, workspace_outputs
from .call_plans import planned
from .launch import launch, pow2

LOG2E = 1.4426950408889634
NEG_INF = -float("inf")


@ts.function
def online_step(qt, kt, vt, m, l, acc, keep, qk_scale, MASKED, NEG_SCALE):
    """One key tile of the online softmax (m, l in log2 units); `keep` (broadcast to (BM, BN))
    when MASKED. Unmasked tiles take the row max of the raw scores and scale it (the max
    commutes with a positive scale; a negative one turns it into the min), so each score
    costs one FMA, `s * qk_scale - m`, before its exp2."""
    s = ts.dot(qt, ts.transpose(kt))                             # (BM, BN) raw scores, fp32
    if MASKED:
        s = ts.where(keep, s * qk_scale, NEG_INF)                # log2 units, dropped keys -inf
        m_new = ts.maximum(m, ts.max(s, axis=1, keepdims=True))  # (BM, 1)
        p = ts.exp2(s - m_new)                                   # (BM, BN)
    else:
        if NEG_SCALE:
            top = ts.min(s, axis=1, keepdims=True) * qk_scale    # (BM, 1)
        else:
            top = ts.max(s, axis=1, keepdims=True) * qk_scale    # (BM, 1)
        m_new = ts.maximum(m, top)                               # (BM, 1)
        p = ts.exp2(s * qk_scale - m_new)                        # (BM, BN)
    alpha = ts.exp2(m - m_new)                                   # (BM, 1) rescales the old state
    l = l * alpha + ts.sum(p, axis=1, keepdims=True)
    acc = ts.mma(p.astype(vt.dtype), vt, acc * alpha)            # (BM, DP); p rounded to V's dtype
    return m_new, l, acc


@ts.kernel
def flash_kernel(o: ts.Mut["T", (1, "BM", "DP")], q: ts.Ref["T", ("Z", "H", "SQ", "D")],
                 k: ts.Ref["T", ("Z", "HKV", "SK", "D")], v: ts.Ref["T", ("Z", "HKV", "SK", "D")],
                 qk_scale: float, T: ts.Const[ts.DType], CAUSAL: ts.Const[bool], NEG_SCALE: ts.Const[bool],
                 GROUP: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int], DP: ts.Const[int], Z: int, H: int,
                 HKV: int, SQ: int, SK: int, D: int):
    zh, i = ts.block_id(0), ts.block_id(1)                       # (batch * head, query tile)
    zb, h = zh // H, zh % H
    kvh = h // GROUP                                             # GQA: GROUP query heads per K/V head
    pk = k.partition((1, 1, BN, DP))                             # key tiles: (1, 1, BN, DP)
    pv = v.partition((1, 1, BN, DP))                             # value tiles: (1, 1, BN, DP)
    qt = ts.reshape(ts.load(q, (zb, h, i, 0), shape=(1, 1, BM, DP)), (BM, DP))
    m = ts.full((BM, 1), NEG_INF, ts.f32)                        # (BM, 1) running max (log2 units)
    l = ts.zeros((BM, 1), ts.f32)                                # (BM, 1) running sum
    acc = ts.zeros((BM, DP), ts.f32)                             # (BM, DP)
    # Key tiles [0, free) are inside the keys and (causal) left of the diagonal: no mask.
    # [free, end) hold the ragged last tile and the diagonal; tiles past `end` are never read.
    free = SK // BN
    end = ts.num_tiles(pk, 2)
    if CAUSAL:
        free = min(free, (i * BM) // BN)
        end = min(end, ((i + 1) * BM + BN - 1) // BN)
    for j in range(free):
        kt = ts.reshape(pk.load((zb, kvh, j, 0)), (BN, DP))      # (BN, DP)
        vt = ts.reshape(pv.load((zb, kvh, j, 0)), (BN, DP))      # (BN, DP)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, True, qk_scale, False, NEG_SCALE)
    rows = ts.expand_dims(i * BM + ts.arange(0, BM), 1)          # (BM, 1) query positions
    for j in range(free, end):
        kt = ts.reshape(pk.load((zb, kvh, j, 0)), (BN, DP))
        vt = ts.reshape(pv.load((zb, kvh, j, 0)), (BN, DP))
        cols = ts.expand_dims(j * BN + ts.arange(0, BN), 0)      # (1, BN) key positions
        keep = cols < SK                                         # (1, BN): drop padded keys
        if CAUSAL:
            keep = keep & (cols <= rows)                         # (BM, BN)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    o.store(ts.reshape((acc / l).astype(T), (1, BM, DP)))   # cast, then reshape: the layout change moves bf16, not fp32


@ts.kernel
def flash_rows_kernel(o: ts.Mut["T", (1, "BM", "DP")], q: ts.Ref["T", ("RQ", "CQ")], k: ts.Ref["T", ("RK", "CK")],
                      v: ts.Ref["T", ("RV", "CV")], qk_scale: float, T: ts.Const[ts.DType], CAUSAL: ts.Const[bool],
                      NEG_SCALE: ts.Const[bool], GROUP: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int],
                      DP: ts.Const[int], H: int, SQ: int, SK: int, QZ: int, QH: int, QC: int, KZ: int, KH: int,
                      KC: int, VZ: int, VH: int, VC: int, RQ: int, CQ: int, RK: int, CK: int, RV: int, CV: int):
    """`flash_kernel` with q, k and v seen as 2-D matrices (rows, columns), so each tile is one
    box of a matrix (TMA-addressable). The tile of (batch z, head h, tile i) is at tile row
    z * XZ + h * XH + i and tile column h * XC of matrix X (host-computed; sequence lengths
    divide by the tiles, so no tile straddles two heads)."""
    zh, i = ts.block_id(0), ts.block_id(1)                       # (batch * head, query tile)
    zb, h = zh // H, zh % H
    kvh = h // GROUP
    qt = ts.load(q, (zb * QZ + h * QH + i, h * QC), shape=(BM, DP))              # (BM, DP)
    k_row, k_col = zb * KZ + kvh * KH, kvh * KC                  # tile row / column of key tile 0
    v_row, v_col = zb * VZ + kvh * VH, kvh * VC
    m = ts.full((BM, 1), NEG_INF, ts.f32)                        # (BM, 1) running max (log2 units)
    l = ts.zeros((BM, 1), ts.f32)                                # (BM, 1) running sum
    acc = ts.zeros((BM, DP), ts.f32)                             # (BM, DP)
    free = SK // BN                                              # SK divides by BN on this path
    end = free
    if CAUSAL:
        free = min(free, (i * BM) // BN)
        end = min(end, ((i + 1) * BM + BN - 1) // BN)
    for j in range(free):
        kt = ts.load(k, (k_row + j, k_col), shape=(BN, DP))      # (BN, DP)
        vt = ts.load(v, (v_row + j, v_col), shape=(BN, DP))      # (BN, DP)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, True, qk_scale, False, NEG_SCALE)
    rows = ts.expand_dims(i * BM + ts.arange(0, BM), 1)          # (BM, 1) query positions
    for j in range(free, end):                                   # the diagonal (causal only)
        kt = ts.load(k, (k_row + j, k_col), shape=(BN, DP))
        vt = ts.load(v, (v_row + j, v_col), shape=(BN, DP))
        keep = ts.expand_dims(j * BN + ts.arange(0, BN), 0) <= rows   # (BM, BN)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    o.store(ts.reshape((acc / l).astype(T), (1, BM, DP)))   # cast, then reshape: the layout change moves bf16, not fp32


@ts.function
def first_rows(x, GP, GS, C):
    """The first GS rows of a (GP, C) tile (GS divides GP)."""
    if GS == GP:
        r = x
    else:
        parts = ts.reshape(x, (GP // GS, GS, C))                 # part 0 holds rows 0 .. GS-1
        first = ts.expand_dims(ts.expand_dims(ts.arange(0, GP // GS), 1), 2) == 0
        r = ts.sum(ts.where(first, parts, 0.0), axis=0)          # (GS, C): picks, adds only zeros
    return r


@ts.function
def split_keys(lens, MAXS, BN):
    """This block's keys: split `block_id(0)` of the first `lens[0]` (at most MAXS) positions,
    a whole number of BN-key tiles per split. Returns (stop, first, full, last): its keys end
    at `stop`, tiles [first, full) are all keys and [max(first, full), last) the ragged one."""
    splits = ts.num_blocks(0)
    length = max(min(ts.scalar(ts.load(lens, (0,), shape=(1,))).astype(ts.i32), MAXS), 0)
    per = ((length + splits - 1) // splits + BN - 1) // BN * BN  # keys per split, a multiple of BN
    start = ts.block_id(0) * per
    stop = min(length, start + per)                              # this split's keys: [start, stop)
    return stop, max(start // BN, 0), stop // BN, (stop + BN - 1) // BN


@ts.function
def store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP):
    """A split's unnormalised (acc, max, sum): only the GS >= G rows of real query heads are
    kept (the others were tensor-core padding)."""
    acc_o.store(ts.reshape(first_rows(acc, GP, GS, DP), (1, GS, DP)))
    m_o.store(ts.reshape(first_rows(m, GP, GS, 1), (1, GS, 1)))
    l_o.store(ts.reshape(first_rows(l, GP, GS, 1), (1, GS, 1)))


@ts.function
def decode_start(q, kvh, GP, DP):
    """KV head kvh's query rows (GP, DP), zeros past the group, and empty softmax state."""
    qt = ts.reshape(ts.load(q, (kvh, 0, 0), shape=(1, GP, DP)), (GP, DP))   # (GP, DP)
    m = ts.full((GP, 1), NEG_INF, ts.f32)                        # (GP, 1) running max
    l = ts.zeros((GP, 1), ts.f32)                                # (GP, 1) running sum
    acc = ts.zeros((GP, DP), ts.f32)                             # (GP, DP)
    return qt, m, l, acc


@ts.function
def attend_split(q, k, v, lens, qk_scale, NEG_SCALE, GP, BN, DP, MAXS):
    """Block (split, KV head)'s unnormalised (acc, m, l) over its keys of (HKV, MAXS, D) caches."""
    kvh = ts.block_id(1)                                         # grid: (split, KV head)
    stop, first, full, last = split_keys(lens, MAXS, BN)
    qt, m, l, acc = decode_start(q, kvh, GP, DP)
    pk = k.partition((1, BN, DP))                                # (1, BN, DP)
    pv = v.partition((1, BN, DP))
    for j in range(first, full):
        kt = ts.reshape(pk.load((kvh, j, 0)), (BN, DP))          # (BN, DP)
        vt = ts.reshape(pv.load((kvh, j, 0)), (BN, DP))          # (BN, DP)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, True, qk_scale, False, NEG_SCALE)
    for j in range(max(first, full), last):                      # the ragged last tile, if any
        cols = j * BN + ts.arange(0, BN)                         # (BN,) key positions
        kt = ts.reshape(pk.load((kvh, j, 0)), (BN, DP))
        # Cache rows past the length may hold anything: zero them so 0 * garbage is 0.
        vt = ts.where(ts.expand_dims(cols < stop, 1), ts.reshape(pv.load((kvh, j, 0)), (BN, DP)), 0.0)
        keep = ts.expand_dims(cols < stop, 0)                    # (1, BN)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    return acc, m, l


@ts.function
def attend_split_rows(q, k, v, lens, qk_scale, NEG_SCALE, GP, BN, DP, MAXS, KH, KC, VH, VC):
    """`attend_split` with the caches seen as 2-D matrices: key tile j of KV head h is the
    tile at tile row h * XH + j, tile column h * XC of matrix X (one TMA box)."""
    kvh = ts.block_id(1)                                         # grid: (split, KV head)
    stop, first, full, last = split_keys(lens, MAXS, BN)
    qt, m, l, acc = decode_start(q, kvh, GP, DP)
    k_row, k_col, v_row, v_col = kvh * KH, kvh * KC, kvh * VH, kvh * VC
    for j in range(first, full):
        kt = ts.load(k, (k_row + j, k_col), shape=(BN, DP))      # (BN, DP)
        vt = ts.load(v, (v_row + j, v_col), shape=(BN, DP))      # (BN, DP)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, True, qk_scale, False, NEG_SCALE)
    for j in range(max(first, full), last):                      # the ragged last tile, if any
        cols = j * BN + ts.arange(0, BN)                         # (BN,) key positions
        kt = ts.load(k, (k_row + j, k_col), shape=(BN, DP))
        vt = ts.where(ts.expand_dims(cols < stop, 1), ts.load(v, (v_row + j, v_col), shape=(BN, DP)), 0.0)
        keep = ts.expand_dims(cols < stop, 0)                    # (1, BN)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    return acc, m, l


@ts.function
def combine_splits(acc_o, m_o, l_o, GS, DP):
    """In the last block of a KV head (S16): its splits' partials combined and normalised,
    (GS, DP), rescaling the running sums at each split as the online softmax does. Every
    split is read, those without keys too (they weigh 0): with a branch skipping them the
    paged decode's walk cost ~10 us more over 32 splits on the H200 (the reads inside the
    branch are, it seems, no longer pipelined), where the tuner measured the plain walk at
    +0.8 us over 33 splits against a combination kernel."""
    top = ts.full((GS, 1), NEG_INF, ts.f32)                      # (GS, 1) running max
    l = ts.zeros((GS, 1), ts.f32)                                # (GS, 1)
    acc = ts.zeros((GS, DP), ts.f32)                             # (GS, DP)
    for s in m_o.members():
        ms = ts.reshape(m_o.load(s), (GS, 1))
        new = ts.maximum(top, ms)
        keep = ts.where(top == NEG_INF, 0.0, ts.exp2(top - new))   # empty splits weigh 0
        w = ts.where(ms == NEG_INF, 0.0, ts.exp2(ms - new))
        l = l * keep + ts.reshape(l_o.load(s), (GS, 1)) * w
        acc = acc * keep + ts.reshape(acc_o.load(s), (GS, DP)) * w
        top = new
    return acc / l


@ts.kernel
def decode_partial_kernel(acc_o: ts.Mut[ts.f32, (1, "GS", "DP")], m_o: ts.Mut[ts.f32, (1, "GS", 1)],
                          l_o: ts.Mut[ts.f32, (1, "GS", 1)], q: ts.Ref["T", ("HKV", "G", "D")],
                          k: ts.Ref["T", ("HKV", "MAXS", "D")], v: ts.Ref["T", ("HKV", "MAXS", "D")],
                          lens: ts.Ref["TL", (1,)], qk_scale: float, T: ts.Const[ts.DType], TL: ts.Const[ts.DType],
                          NEG_SCALE: ts.Const[bool], GP: ts.Const[int], GS: ts.Const[int], BN: ts.Const[int],
                          DP: ts.Const[int], HKV: int, G: int, D: int, MAXS: int):
    acc, m, l = attend_split(q, k, v, lens, qk_scale, NEG_SCALE, GP, BN, DP, MAXS)
    store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP)


@ts.kernel
def decode_last_kernel(o: ts.MutLast["T", (1, "GS", "DP")], acc_o: ts.Mut[ts.f32, (1, "GS", "DP")],
                       m_o: ts.Mut[ts.f32, (1, "GS", 1)], l_o: ts.Mut[ts.f32, (1, "GS", 1)],
                       q: ts.Ref["T", ("HKV", "G", "D")], k: ts.Ref["T", ("HKV", "MAXS", "D")],
                       v: ts.Ref["T", ("HKV", "MAXS", "D")], lens: ts.Ref["TL", (1,)], qk_scale: float,
                       T: ts.Const[ts.DType], TL: ts.Const[ts.DType], NEG_SCALE: ts.Const[bool], GP: ts.Const[int],
                       GS: ts.Const[int], BN: ts.Const[int], DP: ts.Const[int], HKV: int, G: int, D: int, MAXS: int):
    """`decode_partial_kernel` whose last block per KV head combines the splits into `o`
    (viewed as (HKV, G, D)): one launch instead of two."""
    acc, m, l = attend_split(q, k, v, lens, qk_scale, NEG_SCALE, GP, BN, DP, MAXS)
    store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP)
    if ts.last_arrival():
        o.store(ts.reshape(combine_splits(acc_o, m_o, l_o, GS, DP).astype(T), (1, GS, DP)))


@ts.kernel
def decode_rows_kernel(acc_o: ts.Mut[ts.f32, (1, "GS", "DP")], m_o: ts.Mut[ts.f32, (1, "GS", 1)],
                       l_o: ts.Mut[ts.f32, (1, "GS", 1)], q: ts.Ref["T", ("HKV", "G", "D")],
                       k: ts.Ref["T", ("RK", "CK")], v: ts.Ref["T", ("RV", "CV")], lens: ts.Ref["TL", (1,)],
                       qk_scale: float, T: ts.Const[ts.DType], TL: ts.Const[ts.DType], NEG_SCALE: ts.Const[bool],
                       GP: ts.Const[int], GS: ts.Const[int], BN: ts.Const[int], DP: ts.Const[int], MAXS: int,
                       KH: int, KC: int, VH: int, VC: int, HKV: int, G: int, D: int, RK: int, CK: int, RV: int,
                       CV: int):
    """`decode_partial_kernel` with the caches seen as 2-D matrices (`attend_split_rows`)."""
    acc, m, l = attend_split_rows(q, k, v, lens, qk_scale, NEG_SCALE, GP, BN, DP, MAXS, KH, KC, VH, VC)
    store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP)


@ts.kernel
def decode_rows_last_kernel(o: ts.MutLast["T", (1, "GS", "DP")], acc_o: ts.Mut[ts.f32, (1, "GS", "DP")],
                            m_o: ts.Mut[ts.f32, (1, "GS", 1)], l_o: ts.Mut[ts.f32, (1, "GS", 1)],
                            q: ts.Ref["T", ("HKV", "G", "D")], k: ts.Ref["T", ("RK", "CK")],
                            v: ts.Ref["T", ("RV", "CV")], lens: ts.Ref["TL", (1,)], qk_scale: float,
                            T: ts.Const[ts.DType], TL: ts.Const[ts.DType], NEG_SCALE: ts.Const[bool],
                            GP: ts.Const[int], GS: ts.Const[int], BN: ts.Const[int], DP: ts.Const[int], MAXS: int,
                            KH: int, KC: int, VH: int, VC: int, HKV: int, G: int, D: int, RK: int, CK: int,
                            RV: int, CV: int):
    """`decode_rows_kernel` whose last block per KV head combines the splits into `o`."""
    acc, m, l = attend_split_rows(q, k, v, lens, qk_scale, NEG_SCALE, GP, BN, DP, MAXS, KH, KC, VH, VC)
    store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP)
    if ts.last_arrival():
        o.store(ts.reshape(combine_splits(acc_o, m_o, l_o, GS, DP).astype(T), (1, GS, DP)))


@ts.kernel
def decode_combine_kernel(o: ts.Mut["T", (1, "DP")], acc: ts.Ref[ts.f32, ("S", "R", "D")],
                          m: ts.Ref[ts.f32, ("S", "R", 1)], l: ts.Ref[ts.f32, ("S", "R", 1)],
                          T: ts.Const[ts.DType], G: ts.Const[int], GS: ts.Const[int], SP: ts.Const[int],
                          DP: ts.Const[int], S: int, R: int, D: int):
    h = ts.block_id(0)
    row = (h // G) * GS + h % G                                  # this head's row in the partials
    mt = ts.reshape(ts.load(m, (0, row, 0), shape=(SP, 1, 1), padding=NEG_INF), (SP, 1))   # (SP, 1)
    lt = ts.reshape(ts.load(l, (0, row, 0), shape=(SP, 1, 1)), (SP, 1))                    # (SP, 1)
    at = ts.reshape(ts.load(acc, (0, row, 0), shape=(SP, 1, DP)), (SP, DP))                # (SP, DP)
    top = ts.max(mt, axis=0, keepdims=True)                      # (1, 1)
    w = ts.where(mt == NEG_INF, 0.0, ts.exp2(mt - top))          # (SP, 1): empty splits weigh 0
    num = ts.sum(w * at, axis=0, keepdims=True)                  # (1, DP)
    o.store((num / ts.sum(w * lt, axis=0, keepdims=True)).astype(T))


# --- public API -------------------------------------------------------------------------


@planned
def flash_attention(q, k, v, causal=False, scale=None, out=None, config=None):
    """softmax(q k^T * scale) v for q (H, S, D) or (B, H, S, D) and k, v with HKV heads
    (HKV divides H: grouped-query / multi-query attention). `causal` masks key j > query i
    (top-left aligned, as torch's `is_causal`); `scale` defaults to 1/sqrt(D).
    """
    fn = "flash_attention"
    torch_mode = A.is_torch(q)
    (qt, kt, vt), dtype, device = A.float_operands(fn, q=q, k=k, v=v)
    if qt.ndim not in (3, 4) or kt.ndim != qt.ndim or vt.shape != kt.shape:
        raise A.fail(fn, f"needs q (B, H, S, D) or (H, S, D) and k, v of one shape with the same rank; got "
                         f"q {qt.shape}, k {kt.shape}, v {vt.shape}")
    q4, k4, v4 = (layout.leading(t, 4) for t in (qt, kt, vt))
    zb, h, sq, d = q4.shape
    _, hkv, sk, dk = k4.shape
    if k4.shape[0] != zb or dk != d or (hkv == 0) != (h == 0) or (hkv and h % hkv):   # no heads: torch's empty out
        raise A.fail(fn, f"k/v {kt.shape} do not fit q {qt.shape}: same batch and head_dim, and the KV heads "
                         "must divide the query heads",
                     help="k and v are (B, HKV, S_k, D) for q (B, H, S_q, D), with H a multiple of HKV")
    if sk == 0:
        raise A.fail(fn, "k and v have no keys (sequence length 0)",
                     help="attention over no keys has no softmax: give k and v at least one position")
    o = A.output(out, qt.shape, dtype, device, torch_mode, fn)
    check_aliasing(fn, {"q": qt, "k": kt, "v": vt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    ov = _heads_view(fn, layout.leading(o.tensor, 4))
    cfg = configs.lookup("attention", configs.shape_class(dtype, d, sq), config, dtype,
                         shape=configs.Attention(zb, h, hkv, sq, sk, d, bool(causal), dtype.name),
                         run=lambda c: flash_attention(q, k, v, causal, scale, out, c))
    bm = max(16, min(cfg["block_m"], pow2(sq)))
    bn = max(16, min(cfg["block_n"], pow2(sk)))
    dp = max(16, pow2(d))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if causal:   # query tile i does i + 1 tiles of work: start the longest first, leave no long tail
        cfg = dict(cfg, reverse_blocks=(1,))
    common = dict(cfg=cfg, qk_scale=scale * LOG2E, CAUSAL=bool(causal), NEG_SCALE=scale < 0, GROUP=h // hkv, BN=bn)
    flat = [_matrix(t, rows, dp) for t, rows in ((q4, bm), (k4, bn), (v4, bn))] if cfg["flat"] else [None]
    if None in flat:
        if cfg.get("tma") is None and configs.tma_descriptors():
            # Ragged lengths mask every tile load of the 4-D kernel on pointers; through rank-4
            # TMA descriptors the copy engine fills the rows past the keys with zeros instead.
            common["cfg"] = dict(cfg, tma=True)
        launch(flash_kernel, {"o": (ov, (1, bm, dp))}, q=q4, k=k4, v=v4, **common)
    else:
        (qm, *qx), (km, *kx), (vm, *vx) = flat
        launch(flash_rows_kernel, {"o": (ov, (1, bm, dp))}, q=qm, k=km, v=vm, H=h, SQ=sq, SK=sk,
               **dict(zip(("QZ", "QH", "QC", "KZ", "KH", "KC", "VZ", "VH", "VC"), (*qx, *kx, *vx))), **common)
    return o.returned


def _matrix(t4, rows: int, dp: int):
    """(B, H, S, D) `t4` as one 2-D matrix whose every (batch, head) block of `rows` positions
    is a whole tile, for `flash_rows_kernel`: (view, XZ, XH, XC) with the tile of (z, h, i) at
    tile row z * XZ + h * XH + i and tile column h * XC; None when the layout does not allow it
    (a sequence length that `rows` does not divide, or strides that are not one matrix)."""
    zb, hx, s, d = t4.shape
    sz, sh, ss, sd = t4.strides
    if s % rows or (sd != 1 and d > 1) or ss < 1:
        return None
    n = s // rows
    if (hx == 1 or sh == s * ss) and (zb == 1 or sz == hx * s * ss) and ss >= d:     # heads one under another
        return layout.strided(t4, (zb * hx * s, d), (ss, 1)), hx * n, n, 0
    if d == dp and (hx == 1 or sh == d) and (zb == 1 or sz == s * ss) and ss >= hx * d:   # heads side by side
        return layout.strided(t4, (zb * s, hx * d), (ss, 1)), n, 0, 1
    return None


@dataclass(frozen=True)
class DecodeWorkspace:
    """Scratch for `decode_attention`: per (split, query row) partial results, fp32."""
    acc: ts.Tensor        # (splits, HKV * GP, D)
    m: ts.Tensor          # (splits, HKV * GP, 1)
    l: ts.Tensor          # (splits, HKV * GP, 1)


def decode_workspace(q, k_cache, config=None) -> DecodeWorkspace:
    """Allocate the scratch of `decode_attention` for these shapes (once, before a graph capture)."""
    fn = "decode_workspace"
    qt, kt = A.tensor(q, "q", fn, differentiable=False), A.tensor(k_cache, "k_cache", fn, differentiable=False)
    if qt.ndim != 2 or kt.ndim != 3:
        raise A.fail(fn, f"needs q (H, D) and k_cache (HKV, max_seq, D); got {qt.shape} and {kt.shape}")
    h, d = qt.shape
    hkv, max_seq, _ = kt.shape
    cfg = _decode_config(qt.dtype, d, h // max(hkv, 1), config,
                         configs.Decode(h, hkv, max_seq, d, qt.dtype.name))
    _, splits = decode_tiling(cfg, hkv, max_seq)
    rows = hkv * _stored_rows(h // max(hkv, 1))
    dev = qt.device
    return DecodeWorkspace(A.empty_scratch((splits, rows, d), ts.f32, dev),
                           A.empty_scratch((splits, rows, 1), ts.f32, dev),
                           A.empty_scratch((splits, rows, 1), ts.f32, dev))


@planned
def decode_attention(q, k_cache, v_cache, seq_len, scale=None, out=None, workspace=None, config=None):
    """Attention of one query per head over the first `seq_len` positions of a KV cache.

    q is (H, D); k_cache and v_cache are (HKV, max_seq, D) with HKV dividing H. `seq_len` is
    an int or a one-element integer tensor on q's device (use a tensor inside `ts.graph()`,
    where a Python int would be frozen at capture). With `out=` and `workspace=`
    (`decode_workspace(q, k_cache)`) nothing is allocated.
    """
    fn = "decode_attention"
    torch_mode = A.is_torch(q)
    (qt, kt, vt), dtype, device = A.float_operands(fn, q=q, k_cache=k_cache, v_cache=v_cache)
    if qt.ndim != 2 or kt.ndim != 3 or vt.shape != kt.shape or kt.shape[2] != qt.shape[1]:
        raise A.fail(fn, f"needs q (H, D) and caches (HKV, max_seq, D) of one shape; got q {qt.shape}, "
                         f"k_cache {kt.shape}, v_cache {vt.shape}")
    h, d = qt.shape
    hkv, max_seq, _ = kt.shape
    group = kv_group(fn, h, hkv)
    lens = _lengths(fn, seq_len, max_seq, device)
    o = A.output(out, (h, d), dtype, device, torch_mode, fn)
    if d == 0:   # no head_dim: the output is empty (as torch's), and 1 / sqrt(d) has no value
        return o.returned
    ws = workspace if workspace is not None else decode_workspace(qt, kt, config)
    gs = _stored_rows(group)
    if ws.acc.shape[1:] != (hkv * gs, d):
        raise A.fail(fn, "the workspace was made for other shapes", help="make it with decode_workspace(q, k_cache)")
    # The whole call, before its first launch (the partials, then their combination into `out`).
    check_aliasing(fn, {"q": qt, "k_cache": kt, "v_cache": vt, "seq_len": None if isinstance(seq_len, int) else lens},
                   {"out": o.passed, **workspace_outputs(workspace, ("acc", "m", "l"))})
    cfg = _decode_config(dtype, d, group, config, configs.Decode(h, hkv, max_seq, d, dtype.name))
    dp = max(16, pow2(d))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    bn, _ = decode_tiling(cfg, hkv, max_seq)
    tiles = (1, gs, dp), (1, gs, 1)
    outs = {"acc_o": (ws.acc, tiles[0]), "m_o": (ws.m, tiles[1]), "l_o": (ws.l, tiles[1])}
    common = dict(cfg=cfg, q=layout.split_axis(qt, 0, hkv), lens=lens, qk_scale=scale * LOG2E, NEG_SCALE=scale < 0,
                  GP=_group_rows(group), BN=bn)
    flat = [_matrix(layout.leading(t, 4), bn, dp) for t in (kt, vt)] if cfg["flat"] else [None]
    one = cfg.get("one_kernel", False)   # the last block of each KV head combines its splits (S16)
    if one:
        outs = {"o": (layout.split_axis(o.tensor, 0, hkv), (1, gs, dp)), **outs}
    kernels = (decode_last_kernel, decode_rows_last_kernel) if one else (decode_partial_kernel, decode_rows_kernel)
    # Programmatic dependent launch: the combination starts launching while the partials finish.
    if None in flat:
        launch(kernels[0], outs, k=kt, v=vt, pdl=True, **common)
    else:
        (km, _, kh, kc), (vm, _, vh, vc) = flat
        launch(kernels[1], outs, k=km, v=vm, MAXS=max_seq, KH=kh, KC=kc, VH=vh, VC=vc, pdl=True, **common)
    if one:
        return o.returned
    launch(decode_combine_kernel, {"o": (o.tensor, (1, dp))}, cfg=None, acc=ws.acc, m=ws.m, l=ws.l, G=group, GS=gs,
           SP=pow2(ws.acc.shape[0]), pdl=True)
    return o.returned


def _heads_view(fn, o4):
    """(B, H, S, D) as (B * H, S, D): the output is partitioned per (batch, head)."""
    zb, h, sq, d = o4.shape
    st = o4.strides
    if zb > 1 and st[0] != h * st[1]:
        raise A.fail(fn, f"`out` with strides {st} cannot be viewed as (B * H, S, D)", help="pass a contiguous out")
    return layout.strided(o4, (zb * h, sq, d), st[1:])


def kv_group(fn: str, h: int, hkv: int) -> int:
    """Query heads per KV head (grouped-query attention); refused unless the KV heads divide the query heads."""
    if hkv == 0 or h % hkv:
        raise A.fail(fn, f"the {hkv} KV heads must divide the {h} query heads",
                     help="q's heads are a whole number (>= 1) of groups, one per KV head of the caches")
    return h // hkv


def _group_rows(group: int) -> int:
    """Query rows one decode block computes: the group, padded to a tensor-core tile (>= 16)."""
    return max(16, pow2(group))


def _stored_rows(group: int) -> int:
    """Rows per KV head in the decode workspace: the group, padded to a power of two."""
    return pow2(group)


def _decode_config(dtype, d, group, config, shape=None):
    return configs.lookup("decode", configs.shape_class(dtype, d, group), config, dtype, shape=shape)


def _lengths(fn, seq_len, max_seq, device):
    """`seq_len` as a one-element integer tensor on `device`."""
    if isinstance(seq_len, int) and not isinstance(seq_len, bool):
        if not 0 < seq_len <= max_seq:
            raise A.fail(fn, f"seq_len {seq_len} must be in 1..{max_seq} (the cache's max_seq)",
                         help="attend over at least one cached position, and no more than the cache holds")
        return ts.full((1,), seq_len, ts.i32, device)
    t = A.tensor(seq_len, "seq_len", fn)
    A.dtype_in(t, A.INTS, "seq_len", fn)
    if t.numel != 1 or t.device != device:
        raise A.fail(fn, f"seq_len must be an int or a one-element tensor on {device}; got shape {t.shape} "
                         f"on {t.device}")
    return t.reshape(1)
