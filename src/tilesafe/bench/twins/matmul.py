"""Twins of the GEMM kernels: tiled (`mm_kernel`), persistent with grouped tile order
(`mm_persistent_kernel`), the weight-streaming path for M <= 16 (`skinny_kernel`),
split-K (`split_k_kernel` + `split_sum_kernel`) and the batched product (`bmm_kernel`,
`bmm_persistent_kernel`).

Operands are read through their strides (a transposed weight view is used as it is), with
the tile sizes, group size and Triton options of the tilesafe launch, and through TMA
descriptors for the operands the tilesafe launch used them for; pointer loads are masked
only when an extent does not divide by its tile, as a hand-written kernel would do with
`EVEN_*` flags.
"""
import triton
import triton.language as tl

from .launch import cdiv, launch, pdl, pdl_start
from .tma import descriptor_or_tensor, whole_or_tensor


@triton.jit
def _tile_product(a, b, a_ptr, b_ptr, m0, n0, M, N, K, sam, sak, sbk, sbn, acc, lo, hi, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                  EVEN_K: tl.constexpr, TF32: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr,
                  B_COLS: tl.constexpr):
    rm = m0 + tl.arange(0, BM)
    rn = n0 + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for k in range(lo, hi):                                # K tiles [lo, hi)
        kk = k * BK + rk
        if A_TMA:
            ta = a.load([m0, k * BK])
        elif EVEN_M and EVEN_K:
            ta = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak)
        else:
            ta = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K),
                         other=0.0)
        if B_TMA:
            if B_COLS:
                tb = tl.trans(b.load([n0, k * BK]))
            else:
                tb = b.load([k * BK, n0])
        elif EVEN_N and EVEN_K:
            tb = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn)
        else:
            tb = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                         other=0.0)
        if TF32:
            acc = tl.dot(ta, tb, acc, input_precision="tf32")
        else:
            acc = tl.dot(ta, tb, acc, input_precision="ieee")
    return acc


@triton.jit
def _row_product(a_ptr, b_ptr, rn, N, K, sak, sbk, sbn, lo, hi, BN: tl.constexpr, BK: tl.constexpr,
                 EVEN_N: tl.constexpr, EVEN_K: tl.constexpr):
    """One row of A times columns rn of B over K tiles [lo, hi): FMAs into a (BK, BN)
    partial, summed over K at the end. (BN,) fp32."""
    rk = tl.arange(0, BK)
    part = tl.zeros((BK, BN), tl.float32)
    for k in range(lo, hi):
        kk = k * BK + rk
        if EVEN_N and EVEN_K:
            x = tl.load(a_ptr + kk * sak)
            w = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn)
        else:
            x, w = _row_tile(a_ptr, b_ptr, kk, rn, N, K, sak, sbk, sbn)
        part += x.to(tl.float32)[:, None] * w.to(tl.float32)
    return tl.sum(part, axis=0)


@triton.jit
def _row_tile(a_ptr, b_ptr, kk, rn, N, K, sak, sbk, sbn):
    """A's row at K positions kk and B's (kk, rn) tile, zero past K and N."""
    x = tl.load(a_ptr + kk * sak, mask=kk < K, other=0.0)
    w = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
    return x, w


@triton.jit
def _row_product_prefetch(a_ptr, b_ptr, rn, N, K, sak, sbk, sbn, BN: tl.constexpr, BK: tl.constexpr):
    """`_row_product` over all of K with tile k + 1's loads issued before tile k's FMAs (the
    last tile is loaded again at the end, so every access is in range or masked)."""
    rk = tl.arange(0, BK)
    last = tl.cdiv(K, BK) - 1
    part = tl.zeros((BK, BN), tl.float32)
    xn, wn = _row_tile(a_ptr, b_ptr, rk, rn, N, K, sak, sbk, sbn)
    for k in range(0, last + 1):
        x, w = xn, wn
        xn, wn = _row_tile(a_ptr, b_ptr, tl.minimum(k + 1, last) * BK + rk, rn, N, K, sak, sbk, sbn)
        part += x.to(tl.float32)[:, None] * w.to(tl.float32)
    return tl.sum(part, axis=0)


@triton.jit
def _store(c, c_ptr, acc, m0, n0, M, N, scm, scn, BM: tl.constexpr, BN: tl.constexpr, EVEN_M: tl.constexpr,
           EVEN_N: tl.constexpr, C_TMA: tl.constexpr):
    if C_TMA:
        c.store([m0, n0], acc.to(c_ptr.dtype.element_ty))
    else:
        rm = m0 + tl.arange(0, BM)
        rn = n0 + tl.arange(0, BN)
        ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
        if EVEN_M and EVEN_N:
            tl.store(ptrs, acc.to(c_ptr.dtype.element_ty))
        else:
            tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _one_tile(a, b, c, a_ptr, b_ptr, c_ptr, m0, n0, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
              TF32: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr, B_COLS: tl.constexpr,
              C_TMA: tl.constexpr):
    """c[m0:, n0:] = a[m0:, :] @ b[:, n0:] for one (BM, BN) output tile, fp32 accumulation."""
    acc = tl.zeros((BM, BN), tl.float32)
    acc = _tile_product(a, b, a_ptr, b_ptr, m0, n0, M, N, K, sam, sak, sbk, sbn, acc, 0, tl.cdiv(K, BK),
                        BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32, A_TMA, B_TMA, B_COLS)
    _store(c, c_ptr, acc, m0, n0, M, N, scm, scn, BM, BN, EVEN_M, EVEN_N, C_TMA)


@triton.jit
def mm(c_ptr, a_ptr, b_ptr, c, a, b, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, TF32: tl.constexpr,
       A_TMA: tl.constexpr, B_TMA: tl.constexpr, B_COLS: tl.constexpr, C_TMA: tl.constexpr):
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    _one_tile(a, b, c, a_ptr, b_ptr, c_ptr, m0, n0, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32, A_TMA, B_TMA, B_COLS, C_TMA)


@triton.jit
def mm_persistent(c_ptr, a_ptr, b_ptr, c, a, b, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                  EVEN_K: tl.constexpr, TF32: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr,
                  B_COLS: tl.constexpr, C_TMA: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        per_group = GROUP * tiles_n                       # GROUP rows of tiles, column by column
        first = (tile // per_group) * GROUP
        rows = tl.minimum(tiles_m - first, GROUP)
        within = tile % per_group
        m0, n0 = (first + within % rows) * BM, (within // rows) * BN
        _one_tile(a, b, c, a_ptr, b_ptr, c_ptr, m0, n0, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32, A_TMA, B_TMA, B_COLS, C_TMA)


@triton.jit
def skinny(c_ptr, a_ptr, b_ptr, c, a, b, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr, DOT: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
           TF32: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr, B_COLS: tl.constexpr, C_TMA: tl.constexpr,
           PREFETCH: tl.constexpr = False):
    """All M <= BM rows; each program owns BN output columns and streams its (K, BN) slab once."""
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    if DOT:
        _one_tile(a, b, c, a_ptr, b_ptr, c_ptr, 0, tl.program_id(0) * BN, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32, A_TMA, B_TMA, B_COLS, C_TMA)
    else:                                                   # one row: FMAs
        if PREFETCH:                                        # K tile k + 1 loaded before k's FMAs
            y = _row_product_prefetch(a_ptr, b_ptr, rn, N, K, sak, sbk, sbn, BN, BK)
        else:
            y = _row_product(a_ptr, b_ptr, rn, N, K, sak, sbk, sbn, 0, tl.cdiv(K, BK), BN, BK, EVEN_N, EVEN_K)
        if EVEN_N:
            tl.store(c_ptr + rn * scn, y.to(c_ptr.dtype.element_ty))
        else:
            tl.store(c_ptr + rn * scn, y.to(c_ptr.dtype.element_ty), mask=rn < N)


@triton.jit
def split_k(part_ptr, a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, PER, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr, DOT: tl.constexpr, TF32: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
            EVEN_K: tl.constexpr, PDL: tl.constexpr = False):
    """Split s: the fp32 sum over K tiles [s * PER, (s + 1) * PER) of output tile (i, j)."""
    pdl_start(PDL)                                          # as the tilesafe launch
    s, i, j = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = i * BM + tl.arange(0, BM)
    rn = j * BN + tl.arange(0, BN)
    lo = s * PER
    hi = tl.minimum(lo + PER, tl.cdiv(K, BK))
    if DOT:
        acc = tl.zeros((BM, BN), tl.float32)
        acc = _tile_product(a_ptr, b_ptr, a_ptr, b_ptr, i * BM, j * BN, M, N, K, sam, sak, sbk, sbn, acc, lo, hi,
                            BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32, False, False, False)
    else:
        acc = tl.reshape(_row_product(a_ptr, b_ptr, rn, N, K, sak, sbk, sbn, lo, hi, BN, BK, EVEN_N, EVEN_K), (1, BN))
    ptrs = part_ptr + s * M * N + rm[:, None] * N + rn[None, :]
    tl.store(ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def split_sum(c_ptr, part_ptr, S, M, N, scm, scn, BM: tl.constexpr, BN: tl.constexpr, PDL: tl.constexpr = False):
    pdl_start(PDL)                                          # as the tilesafe launch
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    inside = (rm[:, None] < M) & (rn[None, :] < N)
    acc = tl.zeros((BM, BN), tl.float32)
    for s in range(0, S):
        acc += tl.load(part_ptr + s * M * N + rm[:, None] * N + rn[None, :], mask=inside, other=0.0)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _batch_tile(d, ptr, z, r0, c0, R, C, sr, sc, BR: tl.constexpr, BC: tl.constexpr, EVEN_R: tl.constexpr,
                EVEN_C: tl.constexpr, TMA: tl.constexpr):
    """The (BR, BC) tile at (r0, c0) of matrix z: a (1, BR, BC) box of the rank-3 descriptor
    `d` (zero past the edges), or pointers from `ptr`, which already points at matrix z."""
    if TMA:
        t = tl.reshape(d.load([z, r0, c0]), (BR, BC))
    else:
        r = r0 + tl.arange(0, BR)
        c = c0 + tl.arange(0, BC)
        ptrs = ptr + r[:, None] * sr + c[None, :] * sc
        if EVEN_R and EVEN_C:
            t = tl.load(ptrs)
        else:
            t = tl.load(ptrs, mask=(r[:, None] < R) & (c[None, :] < C), other=0.0)
    return t


@triton.jit
def _bmm_tile(c, a, b, c_ptr, a_ptr, b_ptr, z, m0, n0, M, N, K, saz, sam, sak, sbz, sbk, sbn, scz, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_K: tl.constexpr, TF32: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr,
              C_TMA: tl.constexpr):
    """Output tile (m0, n0) of c[z] = a[z] @ b[z]. The operands are rank 3, so
    `_tile_product`'s 2-D TMA boxes do not fit: the loads are `_batch_tile`'s."""
    a_ptr += z * saz                                        # matrix z (a shared b has stride 0)
    b_ptr += z * sbz
    c_ptr += z * scz
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        ta = _batch_tile(a, a_ptr, z, m0, k * BK, M, K, sam, sak, BM, BK, EVEN_M, EVEN_K, A_TMA)
        tb = _batch_tile(b, b_ptr, z, k * BK, n0, K, N, sbk, sbn, BK, BN, EVEN_K, EVEN_N, B_TMA)
        if TF32:
            acc = tl.dot(ta, tb, acc, input_precision="tf32")
        else:
            acc = tl.dot(ta, tb, acc, input_precision="ieee")
    if C_TMA:
        c.store([z, m0, n0], tl.reshape(acc.to(c_ptr.dtype.element_ty), (1, BM, BN)))
    else:
        _store(c_ptr, c_ptr, acc, m0, n0, M, N, scm, scn, BM, BN, EVEN_M, EVEN_N, False)


@triton.jit
def bmm(c_ptr, a_ptr, b_ptr, c, a, b, Z, M, N, K, saz, sam, sak, sbz, sbk, sbn, scz, scm, scn, BM: tl.constexpr,
        BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
        EVEN_K: tl.constexpr, TF32: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr, C_TMA: tl.constexpr):
    """Grid (Z, M tiles, N tiles): one output tile per program (GROUP unused)."""
    _bmm_tile(c, a, b, c_ptr, a_ptr, b_ptr, tl.program_id(0), tl.program_id(1) * BM, tl.program_id(2) * BN,
              M, N, K, saz, sam, sak, sbz, sbk, sbn, scz, scm, scn, BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32,
              A_TMA, B_TMA, C_TMA)


@triton.jit
def bmm_persistent(c_ptr, a_ptr, b_ptr, c, a, b, Z, M, N, K, saz, sam, sak, sbz, sbk, sbn, scz, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr, EVEN_M: tl.constexpr,
                   EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, TF32: tl.constexpr, A_TMA: tl.constexpr,
                   B_TMA: tl.constexpr, C_TMA: tl.constexpr):
    """A fixed grid walks the tiles matrix by matrix, each matrix's in grouped order."""
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_matrix = tiles_m * tiles_n
    for tile in tl.range(tl.program_id(0), Z * per_matrix, tl.num_programs(0), flatten=True):
        z = tile // per_matrix
        t = tile % per_matrix
        per_group = GROUP * tiles_n                       # GROUP rows of tiles, column by column
        first = (t // per_group) * GROUP
        rows = tl.minimum(tiles_m - first, GROUP)
        within = t % per_group
        _bmm_tile(c, a, b, c_ptr, a_ptr, b_ptr, z, (first + within % rows) * BM, (within // rows) * BN,
                  M, N, K, saz, sam, sak, sbz, sbk, sbn, scz, scm, scn, BM, BN, BK, EVEN_M, EVEN_N, EVEN_K, TF32,
                  A_TMA, B_TMA, C_TMA)


BMM_KERNELS = {"bmm_kernel": bmm, "bmm_persistent_kernel": bmm_persistent}


def bmm_twin(seen, workers: int):
    """The twin of the `bmm_kernel` or `bmm_persistent_kernel` launch in `seen`: `run(c, a, b)`
    for c[z] = a[z] @ b[z], all three (Z, rows, cols); `workers` is the persistent grid's size
    (the SM count on a GPU), as in `gemm_twin`. Rank-3 tensors use TMA only where the launch
    forced it (`tma=True`, bmm's GPU default): described whole, with (1, rows, cols) boxes."""
    name = next(n for n in BMM_KERNELS if n in seen)
    facts = seen[name]
    bm, bn, bk = facts.consts["BM"], facts.consts["BN"], facts.consts["BK"]
    tf32 = bool(facts.consts.get("TF32", False))
    tma = dict(A_TMA="a" in facts.tma, B_TMA="b" in facts.tma, C_TMA="c" in facts.tma)

    def run(c, a, b):
        (z, m, k), n = a.shape, b.shape[2]
        da, db = whole_or_tensor(a, (1, bm, bk), tma["A_TMA"]), whole_or_tensor(b, (1, bk, bn), tma["B_TMA"])
        dc = whole_or_tensor(c, (1, bm, bn), tma["C_TMA"])
        tiles = z * cdiv(m, bm) * cdiv(n, bn)
        grid = facts.grid or (max(1, min(tiles, workers)),)
        launch(BMM_KERNELS[name], grid, c, a, b, dc, da, db, z, m, n, k, *a.stride(), *b.stride(),
               *c.stride(), options=facts.options, BM=bm, BN=bn, BK=bk, GROUP=facts.consts.get("GROUP", 1),
               EVEN_M=m % bm == 0, EVEN_N=n % bn == 0, EVEN_K=k % bk == 0, TF32=tf32, **tma)
        return c
    return run


def _split_twin(seen):
    """The twin of a split-K launch: the partial products, then their sum (bias-free, as benchmarked)."""
    part_facts, sum_facts = seen["split_k_kernel"], seen["split_sum_kernel"]
    c = part_facts.consts
    bm, bn, bk, per = c["BM"], c["BN"], c["BK"], part_facts.scalars["PER"]
    sm, sn = sum_facts.consts["BM"], sum_facts.consts["BN"]
    scratch = {}

    def run(out, a, b):
        import torch
        (m, k), n = a.shape, b.shape[1]
        splits = cdiv(cdiv(k, bk), per)
        part = scratch.get("part")
        if part is None or part.shape != (splits, m, n):
            part = scratch["part"] = torch.empty((splits, m, n), dtype=torch.float32, device=a.device)
        launch(split_k, (splits, cdiv(m, bm), cdiv(n, bn)), part, a, b, m, n, k, a.stride(0), a.stride(1),
               b.stride(0), b.stride(1), per, options=part_facts.options, BM=bm, BN=bn, BK=bk,
               DOT=bool(c["DOT"]), TF32=bool(c.get("TF32", False)), EVEN_M=m % bm == 0, EVEN_N=n % bn == 0,
               EVEN_K=k % bk == 0, PDL=pdl(part_facts))
        launch(split_sum, (cdiv(m, sm), cdiv(n, sn)), out, part, splits, m, n, out.stride(0), out.stride(1),
               options=sum_facts.options, BM=sm, BN=sn, PDL=pdl(sum_facts))
        return out
    return run


def _tail_split_twin(seen, workers: int):
    """A tail-split launch: whole waves of tiles over the first rows (or, with one row of
    tiles, columns), then the last rows (columns) of tiles split over K; the split launch's
    grid says how many rows and columns of tiles it covered."""
    main = gemm_twin({n: f for n, f in seen.items() if not n.startswith("split_")}, workers)
    tail = _split_twin(seen)
    part = seen["split_k_kernel"]
    bm, bn, (tail_rows, tail_cols) = part.consts["BM"], part.consts["BN"], part.grid[1:]

    def run(c, a, b):
        cols = (cdiv(b.shape[1], bn) - tail_cols) * bn
        if cols > 0:                                 # the tail is the last columns
            main(c[:, :cols], a, b[:, :cols])
            tail(c[:, cols:], a, b[:, cols:])
        else:
            rows = (cdiv(a.shape[0], bm) - tail_rows) * bm
            main(c[:rows], a[:rows], b)
            tail(c[rows:], a[rows:], b)
        return c
    return run


def gemm_twin(seen, workers: int):
    """The twin of the GEMM launch in `seen`: `run(c, a, b)` for c = a @ b (b may be a transposed view).
    `workers` is the persistent grid's size (the SM count on a GPU)."""
    main = next((n for n in ("mm_persistent_kernel", "mm_kernel") if n in seen), None)
    if "split_k_kernel" in seen and main is not None:
        return _tail_split_twin(seen, workers)
    if "split_k_kernel" in seen:
        return _split_twin(seen)
    name = next(n for n in ("mm_persistent_kernel", "mm_kernel", "skinny_kernel") if n in seen)
    facts = seen[name]
    bm, bn, bk = facts.consts["BM"], facts.consts["BN"], facts.consts["BK"]
    tf32 = bool(facts.consts.get("TF32", False))
    tma = dict(A_TMA="a" in facts.tma, B_TMA="b" in facts.tma, B_COLS=facts.tma.get("b") == "columns",
               C_TMA="c" in facts.tma)

    def run(c, a, b):
        (m, k), n = a.shape, b.shape[1]
        # TMA descriptors (the tensor itself where unused); b with contiguous columns (a
        # transposed weight) is described as its transpose, (N, K)
        da = descriptor_or_tensor(a, m, k, a.stride(0), (bm, bk), tma["A_TMA"])
        if tma["B_COLS"]:
            db = descriptor_or_tensor(b.T, n, k, b.stride(1), (bn, bk), tma["B_TMA"])
        else:
            db = descriptor_or_tensor(b, k, n, b.stride(0), (bk, bn), tma["B_TMA"])
        dc = descriptor_or_tensor(c, m, n, c.stride(0), (bm, bn), tma["C_TMA"])
        args = (c, a, b, dc, da, db, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                c.stride(1))
        even = dict(EVEN_M=m % bm == 0, EVEN_N=n % bn == 0, EVEN_K=k % bk == 0, TF32=tf32, **tma)
        if name == "mm_kernel":
            launch(mm, (cdiv(m, bm), cdiv(n, bn)), *args, options=facts.options, BM=bm, BN=bn, BK=bk, **even)
        elif name == "mm_persistent_kernel":
            grid = (max(1, min(cdiv(m, bm) * cdiv(n, bn), workers)),)
            launch(mm_persistent, grid, *args, options=facts.options, BM=bm, BN=bn, BK=bk,
                   GROUP=facts.consts["GROUP"], **even)
        else:
            launch(skinny, (cdiv(n, bn),), *args, options=facts.options, BM=bm, BN=bn, BK=bk,
                   DOT=bool(facts.consts["DOT"]), PREFETCH=bool(facts.consts.get("PREFETCH", False)), **even)
        return c
    return run
