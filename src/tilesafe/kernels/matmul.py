"""Matrix multiplies: `matmul` (tiled or persistent GEMM, picked by shape), `gemm` (its product,
which `linear` (x @ w.T, linear_fusions.py) shares: a weight-streaming path for M <= 16), and
`bmm` (batched, rank-3 outputs).

All accumulate in fp32 (`ts.mma`) and round once to the output dtype, after the optional
bias and activation. fp32 inputs use IEEE products unless `precision` (default: torch's
`get_float32_matmul_precision()`) asks for tf32. Operands are read through their strides,
so a transposed view (`w.T`) is used as it is, never copied. Ragged M, N and K are padded
with zeros by the tile loads, which add nothing to the products.
"""
import tilesafe as ts

from ..runtime.freeze import is_frozen
from . import arguments as A
from . import configs, layout, scratch
from .call_checks import check_aliasing
from .call_plans import planned
from . import weight_major
from .elementwise import GELU, SILU
from .gemm_steps import epilogue, mac, split_total
from .gemm_model import auto_splits as _splits   # how many ways to split K (the model predicts the same)
from .gemm_model import linear_tiles, tail_split
from .launch import cdiv, launch, pow2, workers

ACTIVATIONS = {None: -1, "silu": SILU, "gelu": GELU}
SKINNY_M = 16                        # rows up to which the weight-streaming path is used
# K tiles of its weight slab each GEMV block prefetches into L2 before its PDL wait (0: none),
# for weights of at most GEMV_L2_PREFETCH_BYTES; it only acts under programmatic dependent
# launch (ts.prefetch). H200, batch-1 decode step (benchmarks/probes/pdl_prefetch_probe.py,
# PDL on): one tile paid at 0.6B (all four weights <= 13 MB: 0.886 -> 0.861 ms) and every
# setting lost at 4B (weights of 20-100 MB: 2.657 -> 3.045 ms with one tile, more tiles
# worse, also with evict-last priority or without the down projection).
GEMV_L2_PREFETCH = 1
GEMV_L2_PREFETCH_BYTES = 16 << 20
GEMV_L2_KEEP = False        # prefetch with L2 evict-last priority (ts.prefetch(keep=True))


# True: one-row GEMVs over a frozen weight (ts.freeze; the engine freezes a model's weights) take
# the PREFETCH form whatever their config says: its first weight tile is the kernel's first
# access, which a PDL launch issues before its wait (runtime/freeze.py), so that tile streams in
# while the kernel before it drains (without PDL too, so that a step's eager and captured runs
# compute the same bits). Off: on the H200 (Qwen3-4B batch-1 step, session 18 round 1,
# benchmarks/probes/decode_step_variants.py) the early loads saved 45 us over the same PREFETCH
# loops waiting first (2.903 -> 2.858 ms; 0.6B 0.882 -> 0.860), but those loops are slower than
# the tuned, Triton-pipelined ones (2.619 ms; 0.6B 0.823): the down GEMV 18.5 against 13.7 us.
GEMV_EARLY = False
# Weight tiles the fused one-row GEMVs (linear_fusions) keep in flight in that form: 1, or 2
# (DEEP: tiles k + 1 and k + 2, so two tiles load before the wait; 4B 2.906 ms, 0.6B 0.897).
GEMV_EARLY_TILES = 1


# True: the fused one-row GEMVs (linear_fusions: qkv with its norm, o and down with the residual)
# over a frozen weight load weight tile 0 before their tuned, Triton-pipelined loop over the
# others, so that under PDL that tile loads before the wait without the PREFETCH loop that
# GEMV_EARLY needs (which lost on the H200). On: H200, session 19 (decode_step_variants.py: peel),
# a 4B step 2.603 -> 2.584 ms, 0.6B 0.813 either way, the same greedy tokens.
GEMV_EARLY_PEEL = True


def peel_form(m: int, w) -> bool:
    """Whether a fused GEMV of m rows by the weight `w` (a ts.Tensor) peels weight tile 0."""
    return m == 1 and GEMV_EARLY_PEEL and is_frozen(w)


def prefetch_form(cfg: dict, m: int, w) -> int:
    """Weight tiles a GEMV of m rows by the weight `w` (a ts.Tensor) loads ahead of its FMAs:
    0 (the plain loop; Triton pipelines it), 1 (the PREFETCH loop), GEMV_EARLY_TILES (the
    early form, over a frozen weight)."""
    if m != 1:
        return 0
    if GEMV_EARLY and is_frozen(w):
        return GEMV_EARLY_TILES
    return 1 if cfg.get("prefetch") else 0


def l2_prefetch(weight_bytes: int, tiles: int | None = None) -> dict:
    """The GEMV kernels' L2P and L2K for a weight of `weight_bytes`: `tiles` (else
    GEMV_L2_PREFETCH) if it is at most GEMV_L2_PREFETCH_BYTES, else none. Read at each launch
    (a probe may change the settings between captures)."""
    p = GEMV_L2_PREFETCH if tiles is None else tiles
    return {"L2P": p if weight_bytes <= GEMV_L2_PREFETCH_BYTES else 0, "L2K": GEMV_L2_KEEP}


@ts.function
def warm_slab(b, lo, hi, j, L2P, L2K, BK, BN):
    """Prefetch K tiles [lo, min(lo + L2P, hi)) of column tile j of b into L2 (L2K: evicted
    last): under programmatic dependent launch they load while the kernel before this one
    drains (`ts.prefetch`, issued before the PDL wait); otherwise nothing (GEMV_L2_PREFETCH)."""
    if L2P > 0:
        for k in range(lo, min(lo + L2P, hi)):
            ts.prefetch(b, (k, j), shape=(BK, BN), keep=L2K)


@ts.kernel
def mm_kernel(c: ts.Mut["TC", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
              bias: ts.Ref["TB", (-1,)], T: ts.Const[ts.DType], TC: ts.Const[ts.DType], TB: ts.Const[ts.DType],
              HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], TF32: ts.Const[bool], BM: ts.Const[int],
              BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa = a.partition((BM, BK))                                   # tiles of A: (BM, BK)
    pb = b.partition((BK, BN))                                   # tiles of B: (BK, BN)
    i, j = ts.block_id(0), ts.block_id(1)
    acc = ts.zeros((BM, BN), ts.f32)                             # (BM, BN)
    for k in range(ts.num_tiles(pa, 1)):
        acc = mac(pa.load((i, k)), pb.load((k, j)), acc, TF32)
    c.store(epilogue(acc, bias, j, BN, HAS_BIAS, ACT).astype(TC))


@ts.kernel
def mm_persistent_kernel(c: ts.MutTiles["TC", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
                         bias: ts.Ref["TB", (-1,)], T: ts.Const[ts.DType], TC: ts.Const[ts.DType],
                         TB: ts.Const[ts.DType], HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], TF32: ts.Const[bool],
                         GROUP: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int],
                         M: int, N: int, K: int):
    pa = a.partition((BM, BK))                                   # (BM, BK)
    pb = b.partition((BK, BN))                                   # (BK, BN)
    for idx in c.tiles(group=GROUP):                             # grouped order: A's rows stay in L2
        acc = ts.zeros((BM, BN), ts.f32)                         # (BM, BN)
        for k in range(ts.num_tiles(pa, 1)):
            acc = mac(pa.load((idx[0], k)), pb.load((k, idx[1])), acc, TF32)
        c.store(epilogue(acc, bias, idx[1], BN, HAS_BIAS, ACT).astype(TC), idx)


@ts.kernel
def skinny_kernel(c: ts.Mut["TC", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
                  bias: ts.Ref["TB", (-1,)], T: ts.Const[ts.DType], TC: ts.Const[ts.DType], TB: ts.Const[ts.DType],
                  HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], TF32: ts.Const[bool], DOT: ts.Const[bool],
                  BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], PREFETCH: ts.Const[bool],
                  L2P: ts.Const[int], L2K: ts.Const[bool], M: int, N: int, K: int):
    """M <= BM rows: each block owns BN output columns and streams its (K, BN) slab of B once."""
    pa = a.partition((BM, BK))                                   # all rows of A: (BM, BK)
    pb = b.partition((BK, BN))                                   # (BK, BN)
    j = ts.block_id(1)
    warm_slab(b, 0, ts.num_tiles(pb, 0), j, L2P, L2K, BK, BN)    # under PDL: before the wait
    if DOT:                                                      # 2..16 rows: tensor cores, BM = 16
        acc = ts.zeros((BM, BN), ts.f32)                         # (BM, BN)
        for k in range(ts.num_tiles(pa, 1)):
            acc = mac(pa.load((0, k)), pb.load((k, j)), acc, TF32)
    elif PREFETCH:                                               # one row, K tile k + 1 loaded before k's FMAs
        part = ts.zeros((BK, BN), ts.f32)                        # (BK, BN) partial products
        last = ts.num_tiles(pa, 1) - 1
        wn = pb.load((0, j))                                     # the weight first: it may precede a PDL wait
        xn = pa.load((0, 0))
        for k in range(ts.num_tiles(pa, 1)):
            xk, wk = xn, wn
            nxt = ts.minimum(k + 1, last)                        # the last tile again at the end: in range
            xn, wn = pa.load((0, nxt)), pb.load((nxt, j))
            part = part + ts.reshape(xk.astype(ts.f32), (BK, 1)) * wk.astype(ts.f32)
        acc = ts.reshape(ts.sum(part, axis=0), (1, BN))          # (1, BN)
    else:                                                        # one row: a GEMV by FMAs
        part = ts.zeros((BK, BN), ts.f32)                        # (BK, BN) partial products
        for k in range(ts.num_tiles(pa, 1)):
            xk = ts.reshape(pa.load((0, k)).astype(ts.f32), (BK, 1))
            part = part + xk * pb.load((k, j)).astype(ts.f32)
        acc = ts.reshape(ts.sum(part, axis=0), (1, BN))          # (1, BN)
    c.store(epilogue(acc, bias, j, BN, HAS_BIAS, ACT).astype(TC))


@ts.function
def k_slice(a, b, s, i, j, PER, TF32, DOT, BM, BN, BK, L2P, L2K):
    """The fp32 (BM, BN) sum over K tiles [s * PER, (s + 1) * PER) of output tile (i, j)."""
    pa = a.partition((BM, BK))                                   # (BM, BK)
    pb = b.partition((BK, BN))                                   # (BK, BN)
    lo = s * PER
    hi = min(lo + PER, ts.num_tiles(pa, 1))                      # this split's K tiles: [lo, hi)
    warm_slab(b, lo, hi, j, L2P, L2K, BK, BN)                    # under PDL: before the wait
    if DOT:
        acc = ts.zeros((BM, BN), ts.f32)                         # (BM, BN)
        for k in range(lo, hi):
            acc = mac(pa.load((i, k)), pb.load((k, j)), acc, TF32)
    else:                                                        # one row (BM = 1): FMAs
        prod = ts.zeros((BK, BN), ts.f32)                        # (BK, BN) partial products
        for k in range(lo, hi):
            xk = ts.reshape(pa.load((0, k)).astype(ts.f32), (BK, 1))
            prod = prod + xk * pb.load((k, j)).astype(ts.f32)
        acc = ts.reshape(ts.sum(prod, axis=0), (1, BN))          # (1, BN)
    return acc


@ts.kernel
def split_k_kernel(part: ts.Mut[ts.f32, (1, "BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
                   T: ts.Const[ts.DType], TF32: ts.Const[bool], DOT: ts.Const[bool], BM: ts.Const[int],
                   BN: ts.Const[int], BK: ts.Const[int], L2P: ts.Const[int], L2K: ts.Const[bool],
                   PER: int, M: int, N: int, K: int):
    """Split s of a split-K product: the fp32 sum over K tiles [s * PER, (s + 1) * PER) of
    output tile (i, j), into part[s]. Few output tiles (skinny M, small N) then still fill
    every SM; `split_sum_kernel` adds the splits up."""
    acc = k_slice(a, b, ts.block_id(0), ts.block_id(1), ts.block_id(2), PER, TF32, DOT, BM, BN, BK, L2P, L2K)
    part.store(ts.reshape(acc, (1, BM, BN)))


@ts.kernel
def split_k_last_kernel(c: ts.MutLast["TC", ("BM", "BN")], part: ts.Mut[ts.f32, (1, "BM", "BN")],
                        a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")], bias: ts.Ref["TB", (-1,)],
                        T: ts.Const[ts.DType], TC: ts.Const[ts.DType], TB: ts.Const[ts.DType],
                        HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], TF32: ts.Const[bool], DOT: ts.Const[bool],
                        BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], L2P: ts.Const[int],
                        L2K: ts.Const[bool], PER: int, M: int, N: int, K: int):
    """`split_k_kernel` in one launch: the last split of each output tile to finish adds the
    splits' partials up, in split order (the same sum whichever block is last), and stores
    the tile (S16, `ts.last_arrival`) — no second kernel, and the partials are read while
    they are still in L2."""
    j = ts.block_id(2)
    acc = k_slice(a, b, ts.block_id(0), ts.block_id(1), j, PER, TF32, DOT, BM, BN, BK, L2P, L2K)
    part.store(ts.reshape(acc, (1, BM, BN)))
    if ts.last_arrival():
        c.store(epilogue(split_total(part, BM, BN), bias, j, BN, HAS_BIAS, ACT).astype(TC))


@ts.kernel
def split_sum_kernel(c: ts.Mut["TC", ("BM", "BN")], part: ts.Ref[ts.f32, ("S", "M", "N")],
                     bias: ts.Ref["TB", (-1,)], TC: ts.Const[ts.DType], TB: ts.Const[ts.DType],
                     HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int],
                     S: int, M: int, N: int):
    """c = activation(sum over s of part[s] + bias), rounded once to c's dtype."""
    pp = part.partition((1, BM, BN))                             # (1, BM, BN)
    i, j = ts.block_id(0), ts.block_id(1)
    acc = ts.zeros((BM, BN), ts.f32)                             # (BM, BN)
    for s in range(ts.num_tiles(pp, 0)):
        acc = acc + ts.reshape(pp.load((s, i, j)), (BM, BN))
    c.store(epilogue(acc, bias, j, BN, HAS_BIAS, ACT).astype(TC))


@ts.kernel
def bmm_kernel(c: ts.Mut["TC", (1, "BM", "BN")], a: ts.Ref["T", ("Z", "M", "K")], b: ts.Ref["T", ("Z", "K", "N")],
               T: ts.Const[ts.DType], TC: ts.Const[ts.DType], TF32: ts.Const[bool], BM: ts.Const[int],
               BN: ts.Const[int], BK: ts.Const[int], Z: int, M: int, N: int, K: int):
    pa = a.partition((1, BM, BK))                                # (1, BM, BK)
    pb = b.partition((1, BK, BN))                                # (1, BK, BN)
    z, i, j = ts.block_id(0), ts.block_id(1), ts.block_id(2)
    acc = ts.zeros((BM, BN), ts.f32)                             # (BM, BN)
    for k in range(ts.num_tiles(pa, 2)):
        ta = ts.reshape(pa.load((z, i, k)), (BM, BK))
        tb = ts.reshape(pb.load((z, k, j)), (BK, BN))
        acc = mac(ta, tb, acc, TF32)
    c.store(ts.reshape(acc.astype(TC), (1, BM, BN)))            # cast, then reshape (as flash)


@ts.kernel
def bmm_persistent_kernel(c: ts.MutTiles["TC", (1, "BM", "BN")], a: ts.Ref["T", ("Z", "M", "K")],
                          b: ts.Ref["T", ("Z", "K", "N")], T: ts.Const[ts.DType], TC: ts.Const[ts.DType],
                          TF32: ts.Const[bool], GROUP: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int],
                          BK: ts.Const[int], Z: int, M: int, N: int, K: int):
    """`bmm_kernel` over a fixed set of blocks: matrix by matrix, each in grouped order, so the
    blocks running together share one matrix's operands in L2 (the launch grid runs the batch
    axis fastest: every wave would read a slice of every matrix)."""
    pa = a.partition((1, BM, BK))                                # (1, BM, BK)
    pb = b.partition((1, BK, BN))                                # (1, BK, BN)
    for idx in c.tiles(group=GROUP):                             # (z, i, j), z slowest
        acc = ts.zeros((BM, BN), ts.f32)                         # (BM, BN)
        for k in range(ts.num_tiles(pa, 2)):
            ta = ts.reshape(pa.load((idx[0], idx[1], k)), (BM, BK))
            tb = ts.reshape(pb.load((idx[0], k, idx[2])), (BK, BN))
            acc = mac(ta, tb, acc, TF32)
        c.store(ts.reshape(acc.astype(TC), (1, BM, BN)), idx)


# --- public API -------------------------------------------------------------------------


@planned
def matmul(a, b, out_dtype=None, bias=None, activation=None, precision=None, out=None, config=None):
    """`activation(a @ b + bias)` for a of shape (..., K) and b of shape (K, N).

    bf16/fp16/fp32 inputs, fp32 accumulation; `out_dtype` defaults to a's dtype. M <= 16
    rows take the weight-streaming path; larger problems a tiled GEMM, persistent when
    there are many more tiles than workers (`config={"persistent": True/False}` forces it).
    """
    fn = "matmul"
    at, bt = A.tensor(a, "a", fn), A.tensor(b, "b", fn)
    if at.ndim < 1 or bt.ndim != 2:
        raise A.fail(fn, f"needs a of shape (..., K) and b of shape (K, N); got {at.shape} and {bt.shape}",
                     help="use ts.kernels.bmm for batches of matrices")
    return gemm(fn, A.is_torch(a), at, bt, out_dtype, bias, activation, precision, out, config, ("a", "b"))


@planned
def bmm(a, b, out_dtype=None, precision=None, out=None, config=None):
    """Batched `a @ b`: (Z, M, K) @ (Z, K, N) -> (Z, M, N); b may be (K, N) or (1, K, N),
    shared by the whole batch (a stride-0 view, never copied). Persistent (matrix by
    matrix, grouped tile order) when there are many more tiles than workers, as `matmul`;
    `config={"persistent": True/False}` forces it."""
    fn = "bmm"
    torch_mode = A.is_torch(a)
    (at, bt), dtype, device = A.float_operands(fn, a=a, b=b)
    if at.ndim != 3 or bt.ndim not in (2, 3) or at.shape[2] != bt.shape[-2]:
        raise A.fail(fn, f"needs a (Z, M, K) and b (Z, K, N); got {at.shape} and {bt.shape}")
    z, m, k = at.shape
    n = bt.shape[-1]
    bv = layout.broadcast(bt, (z, k, n))
    if bv is None:
        raise A.fail(fn, f"b's batch {bt.shape[0]} does not match a's {z}")
    cdt = A.float_dtype(out_dtype, fn) if out_dtype is not None else dtype
    o = A.output(out, (z, m, n), cdt, device, torch_mode, fn)
    check_aliasing(fn, {"a": at, "b": bt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    cfg = configs.lookup("bmm", configs.shape_class(dtype, m, n, k), config, dtype)
    bm, bn, bk = (_mma_tile(cfg[key], size) for key, size in (("block_m", m), ("block_n", n), ("block_k", k)))
    args = dict(a=at, b=bv, TF32=A.tf32(fn, dtype, precision), BK=bk)
    persistent = cfg["persistent"]
    if persistent is None:
        persistent = z * cdiv(m, bm) * cdiv(n, bn) > 2 * workers(device)
    if persistent:
        launch(bmm_persistent_kernel, {"c": (o.tensor, (1, bm, bn))}, cfg=cfg, GROUP=cfg["group"], **args)
    else:
        launch(bmm_kernel, {"c": (o.tensor, (1, bm, bn))}, cfg=cfg, **args)
    return o.returned


# --- dispatch -----------------------------------------------------------------------------


def gemm(fn, torch_mode, at, bt, out_dtype, bias, activation, precision, out, config, names):
    """`matmul`'s and `linear`'s product (linear passes w.T as bt): the checks, the config by
    shape, the launches. `fn` names the caller in errors; `names` its two operands."""
    (at, bt), dtype, device = A.float_operands(fn, **dict(zip(names, (at, bt))))
    k, n = bt.shape
    if at.shape[-1] != k:
        raise A.fail(fn, f"inner dimensions differ: {at.shape} @ {bt.shape} ({at.shape[-1]} != {k})")
    cdt = A.float_dtype(out_dtype, fn) if out_dtype is not None else dtype
    if activation not in ACTIVATIONS:
        raise A.fail(fn, f"activation must be None, \"silu\" or \"gelu\", got {activation!r}")
    o = A.output(out, at.shape[:-1] + (n,), cdt, device, torch_mode, fn)
    views = layout.matrices([at, o.tensor])
    if views is None:
        raise A.fail(fn, f"the leading axes of a {at.shape} do not merge into one", help="pass a contiguous tensor")
    av, cv = views
    m = av.shape[0]
    if m == 0 or n == 0:
        return o.returned
    bias_t = A.bias_vector(fn, bias, n, av)
    # The whole call, before its first launch (split-K and tail splits run two or three).
    check_aliasing(fn, dict(zip(names, (at, bt)), bias=bias_t if bias is not None else None), {"out": o.passed})
    common = dict(a=av, b=bt, bias=bias_t, HAS_BIAS=bias is not None, ACT=ACTIVATIONS[activation],
                  TF32=A.tf32(fn, dtype, precision))
    if k == 0:   # an empty sum: torch gives zeros (then bias, activation); no config or K tiling to look up
        launch(mm_kernel, {"c": (cv, (_mma_tile(64, m), _mma_tile(64, n)))}, cfg=None, BK=16, **common)
        return o.returned
    if m <= SKINNY_M:
        cfg = skinny_config(dtype, m, n, k, config,
                            run=lambda c: gemm(fn, torch_mode, at, bt, out_dtype, bias, activation, precision, out, c,
                                               names))
        if cfg.get("weight_major") and m > 1:
            weight_major.run(cv, cfg, common)
            return o.returned
        bm, bn, bk, splits = skinny_tiles(cfg, m, n, k)
        if splits > 1:
            _split_k(cv, (bm, bn, bk), splits, cfg, DOT=m > 1, **common)
        else:
            launch(skinny_kernel, {"c": (cv, (bm, bn))}, cfg=cfg, DOT=m > 1, BK=bk,
                   PREFETCH=prefetch_form(cfg, m, bt) > 0, **l2_prefetch(bt.nbytes), **common)
        return o.returned
    cfg = configs.lookup("matmul", matmul_keys(dtype, m, n, k), config, dtype,
                         shape=configs.Gemm(m, n, k, dtype.name),
                         run=lambda c: gemm(fn, torch_mode, at, bt, out_dtype, bias, activation, precision, out, c,
                                            names))
    if cfg.get("weight_major"):
        weight_major.run(cv, cfg, common)
        return o.returned
    bm, bn, bk = (_mma_tile(cfg[key], size) for key, size in (("block_m", m), ("block_n", n), ("block_k", k)))
    splits = _splits(cfg, cdiv(m, bm) * cdiv(n, bn), cdiv(k, bk))
    if splits > 1:
        _split_k(cv, (bm, bn, bk), splits, cfg, DOT=True, **common)
        return o.returned
    sms = workers(device)
    persistent = cfg["persistent"]
    if persistent is None:
        persistent = cdiv(m, bm) * cdiv(n, bn) > 2 * sms
    tail = tail_split(cfg, m, n, bm, bn, cdiv(k, bk), sms)
    if tail is not None:   # whole waves of tiles, then the last rows (columns) of tiles split over K
        axis, kept, splits = tail
        head, rest = _parts(axis, kept, cv, common)
        _tiles(head[0], (bm, bn, bk), persistent, cfg, head[1])
        _split_k(rest[0], (bm, bn, bk), splits, cfg, DOT=True, **rest[1])
    else:
        _tiles(cv, (bm, bn, bk), persistent, cfg, common)
    return o.returned


def skinny_config(dtype, m: int, n: int, k: int, config, run=None) -> dict:
    """The config of an M <= 16 product by an (N, K) weight: `linear`'s, and the fused GEMVs'
    (`linear_fusions.fused_config`), which stream the weight as `linear` does except where the
    table holds a measured entry of their own for the weight (their prologue's registers can
    cost a wave: fused_config says how). `run(config)` makes
    the call with that config, for first-use tuning (whichever of the two runs first tunes
    the shared shape bucket; the other then reuses its choice)."""
    return configs.lookup("linear", linear_keys(dtype, m, n, k), config, dtype,
                          shape=configs.Gemm(m, n, k, dtype.name), run=run)


def skinny_tiles(cfg: dict, m: int, n: int, k: int) -> tuple[int, int, int, int]:
    """(block_m, block_n, block_k, K splits) of an M <= 16 product with config `cfg`. The
    column and K tiles and the splits are the config model's `linear_tiles`, so the launch and
    its prediction follow one rule (a narrow column tile gives more blocks without split-K;
    automatic split-K only for one row, a config's split_k for 2..16)."""
    # One row: FMAs, any column tile. 2..16 rows: tensor-core tiles of >= 16; block_m = 64
    # pads the rows so that Hopper can use its warpgroup MMA, which needs 64 (the padding
    # rows are masked, never read).
    bm = 1 if m == 1 else max(SKINNY_M, pow2(cfg["block_m"]))
    return (bm, *linear_tiles(cfg, configs.Gemm(m, n, k)))


def _parts(axis, kept, cv, common):
    """(output view, launch arguments) of the first `kept` rows (axis 0) or columns (axis 1)
    of a product, then of the rest: a's rows, or b's and the bias's columns, go with them."""
    if axis == 0:
        return ((cv[:kept], dict(common, a=common["a"][:kept])),
                (cv[kept:], dict(common, a=common["a"][kept:])))
    b, bias = common["b"], common["bias"]
    cut = (lambda t, s: t[s]) if common["HAS_BIAS"] else (lambda t, s: t)   # a stand-in bias stays
    return ((cv[:, :kept], dict(common, b=b[:, :kept], bias=cut(bias, slice(None, kept)))),
            (cv[:, kept:], dict(common, b=b[:, kept:], bias=cut(bias, slice(kept, None)))))


def _tiles(cv, tiles, persistent, cfg, common):
    bm, bn, bk = tiles
    if persistent:
        launch(mm_persistent_kernel, {"c": (cv, (bm, bn))}, cfg=cfg, GROUP=cfg["group"], BK=bk, **common)
    else:
        launch(mm_kernel, {"c": (cv, (bm, bn))}, cfg=cfg, BK=bk, **common)


def matmul_keys(dtype, m: int, n: int, k: int) -> tuple[str, str]:
    """The shape classes of an M > 16 product, most specific first: this (N, K) weight at
    M's bucket, then all three sizes bucketed."""
    return configs.weight_class(dtype, (m,), (n, k)), configs.shape_class(dtype, m, n, k)


def linear_keys(dtype, m: int, n: int, k: int) -> tuple[str, ...]:
    """The shape classes of an M <= 16 product, most specific first: one row (a GEMV: FMAs,
    maybe split-K) has its own classes before the ones it shares with 2..16 rows
    (tensor-core tiles); each is this exact (N, K) weight, then (N, K) bucketed."""
    exact, key = configs.weight_class(dtype, (), (n, k)), configs.shape_class(dtype, n, k)
    return (f"{exact}/gemv", f"{key}/gemv", exact, key) if m == 1 else (exact, key)


def _split_k(cv, tiles, splits, cfg, a, b, bias, HAS_BIAS, ACT, TF32, DOT):
    """c = epilogue(a @ b) as `splits` fp32 partial products (in the device's scratch,
    `scratch.py`), then their sum: by a second kernel, or (config `one_kernel`) by the last
    split of each output tile to finish (`split_k_last_kernel`)."""
    bm, bn, bk = tiles
    (m, k), n = a.shape, b.shape[1]
    per = cdiv(cdiv(k, bk), splits)                              # K tiles per split
    splits = cdiv(cdiv(k, bk), per)                              # no empty split
    part, = scratch.views(a.device, (splits, m, n))
    warm = l2_prefetch(b.nbytes) if m <= SKINNY_M else {"L2P": 0, "L2K": False}
    if cfg.get("one_kernel"):
        launch(split_k_last_kernel, {"c": (cv, (bm, bn)), "part": (part, (1, bm, bn))}, cfg=cfg, a=a, b=b,
               bias=bias, HAS_BIAS=HAS_BIAS, ACT=ACT, TF32=TF32, DOT=DOT, BK=bk, PER=per, **warm, pdl=True)
        return
    # Programmatic dependent launch: the sum starts launching while the partials finish.
    launch(split_k_kernel, {"part": (part, (1, bm, bn))}, cfg=cfg, a=a, b=b, TF32=TF32, DOT=DOT, BK=bk, PER=per,
           **warm, pdl=True)
    sm = min(pow2(m), 16)
    sn = max(16, min(pow2(n), 2048 // sm))
    launch(split_sum_kernel, {"c": (cv, (sm, sn))}, cfg=None, part=part, bias=bias, HAS_BIAS=HAS_BIAS, ACT=ACT,
           pdl=True)


def _mma_tile(want: int, size: int) -> int:
    """The config's tile, shrunk for small sizes but never below 16 (tensor-core minimum)."""
    return max(16, min(want, pow2(size)))
