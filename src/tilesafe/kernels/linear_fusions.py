"""`linear` with its input computed on the fly and the residual added on the way out: the
decode step's projections without the small kernels between them.

    rms_norm_linear(x, g, w)          == linear(rms_norm(x, g), w)
    silu_mul_linear(gate_up, w)       == linear(silu_mul(gate_up[..., :I], gate_up[..., I:]), w)
    linear(x, w, residual=r)          == linear(x, w) + r          (out=r updates r in place)

For M <= 16 rows each is one weight-streaming GEMV (`matmul.skinny_kernel`'s loop, or its
split-K form) whose input tile is made from x as it is loaded — the prologue — and whose
output tile gets the residual before it is stored — the epilogue:
  NORM      (split-K) each block first walks its rows of x for the sum of squares: every
            block recomputes it from L2 (x is a few KB, the block's slab of W is far larger);
  NORM_LATE (one launch, bf16 and f32 rows) no pass before the loop: each K tile of x is
            multiplied by the norm weight as it is loaded and its squares summed on the way,
            since the block's loop sees the whole row; the product is scaled by 1 / rms once,
            before the epilogue (linear(x * g, w) * r == linear(x * r * g, w) for the row's
            scalar r). f16 rows keep NORM: x * g may pass f16's 65504 where x * r * g does not;
  SILU_MUL  silu(gate) * up from the two halves of the packed gate/up projection.
The prologue's tile is rounded to x's dtype, as the separate kernel would store it (NORM_LATE
rounds x * g, before the row's scale, so its products differ from the unfused sequence's by
that rounding: within a few units of x's last place), and the epilogue rounds the product
before adding the residual, as `linear` then `residual_add` would. Larger M runs the
unfused sequence (the prologue would be recomputed by every tile of a GEMM).
"""
import tilesafe as ts

from . import arguments as A
from . import configs, layout, scratch
from .call_checks import check_aliasing
from .call_plans import planned
from .elementwise import residual_add, silu_mul
from .gemm_steps import epilogue, mac
from .launch import cdiv, launch, pow2
from .matmul import ACTIVATIONS, SKINNY_M, gemm, l2_prefetch, skinny_config
from .matmul import peel_form, prefetch_form, skinny_tiles, warm_slab
from .norms import rms_norm

PLAIN, NORM, SILU_MUL, NORM_LATE = 0, 1, 2, 3   # prologues
# The one-launch GEMVs normalise late (NORM_LATE: statistics gathered in the weight loop, one
# scale at the end) instead of a pass over x before the loop (NORM); the split-K form keeps
# NORM (a split sees only its K slice). The pass before the loop is what lost at 4B and 8B
# (every block of 2432 re-read x before its first weight tile; decode_fusions.py).
LATE_NORM = True
# K tiles silu_mul_linear's GEMV prefetches before its PDL wait (None: matmul.GEMV_L2_PREFETCH).
# A down projection follows the gate/up GEMV, whose stream (100 MB at 4B) can evict lines
# prefetched that early before they are read.
SILU_L2_PREFETCH = None
NO_RES, RES_REF, RES_OWN = 0, 1, 2              # residual: none, another tensor, the output itself


def norm_prologue(dtype, splits: int) -> int:
    """The norm prologue of a GEMV over rows of `dtype` in `splits` K splits: NORM_LATE in one
    launch where x * g stays in range (bf16 and f32 share f32's exponent), else NORM. In f16
    a large row times the weight (|x| ~ 3000, g ~ 40) is past 65504, the normed row is not."""
    return NORM_LATE if LATE_NORM and splits == 1 and dtype != ts.f16 else NORM


@ts.function
def row_scale(pa, eps, K, BM, BK, PRO):
    """(BM, 1) f32: 1 / rms of each row of x (NORM), else ones."""
    r = ts.full((BM, 1), 1.0, ts.f32)
    if PRO == NORM:
        ss = ts.zeros((BM, BK), ts.f32)                          # (BM, BK) sums of squares
        for k in range(ts.num_tiles(pa, 1)):
            t = pa.load((0, k)).astype(ts.f32)
            ss = ss + t * t
        r = ts.rsqrt(ts.sum(ss, axis=1, keepdims=True) / K + eps)
    return r


@ts.function
def input_tile(pa, pu, g, k, r, T, BK, PRO):
    """K tile k of the GEMV's input rows (BM, BK) in T, after the prologue."""
    t = pa.load((0, k))                                          # (BM, BK)
    if PRO == NORM:
        gk = ts.reshape(ts.load(g, (k,), shape=(BK,)).astype(ts.f32), (1, BK))
        t = (t.astype(ts.f32) * r * gk).astype(T)                # as rms_norm_kernel rounds it
    elif PRO == NORM_LATE:                                       # x * g: the row's scale comes at the end
        gk = ts.reshape(ts.load(g, (k,), shape=(BK,)).astype(ts.f32), (1, BK))
        t = (t.astype(ts.f32) * gk).astype(T)
    elif PRO == SILU_MUL:
        gate = t.astype(ts.f32)
        t = (gate * ts.sigmoid(gate) * pu.load((0, k)).astype(ts.f32)).astype(T)   # as silu_mul rounds it
    return t


@ts.function
def late_tile(pa, pu, g, k, r, ss, T, BK, PRO):
    """`input_tile`, and ss plus the squares of x's tile for NORM_LATE, from the one load."""
    if PRO == NORM_LATE:
        t = pa.load((0, k)).astype(ts.f32)                       # (BM, BK)
        ss = ss + t * t
        gk = ts.reshape(ts.load(g, (k,), shape=(BK,)).astype(ts.f32), (1, BK))
        x = (t * gk).astype(T)
    else:
        x = input_tile(pa, pu, g, k, r, T, BK, PRO)
    return x, ss


@ts.function
def raw_tile(pa, pu, g, k, BK, PRO):
    """What K tile k of the input rows is made from, as loaded: x's tile (BM, BK) and up's
    tile (SILU_MUL), the norm weight's (1, BK) (NORM, NORM_LATE), else x's again. The loops
    that load a step ahead (PREFETCH, DEEP) load these and apply the prologue (`made_tile`)
    only when they use them, so no step waits for a load it issued itself: the prologue made
    at load time waited for x's tiles (from L2) before the weight tile after them was even
    issued (the 32B down projection ran at 2.85 TB/s, its plain GEMV at ~4.1)."""
    t = pa.load((0, k))                                          # (BM, BK)
    v = t
    if PRO == SILU_MUL:
        v = pu.load((0, k))                                      # (BM, BK)
    elif PRO == NORM or PRO == NORM_LATE:
        v = ts.reshape(ts.load(g, (k,), shape=(BK,)), (1, BK))   # (1, BK)
    return t, v


@ts.function
def made_tile(t, v, r, ss, T, PRO):
    """`late_tile` from `raw_tile`'s loads t, v: the input tile after the prologue, and ss
    plus the squares of x's tile (NORM_LATE). Rounds as `input_tile` does."""
    x = t
    if PRO == NORM:
        x = (t.astype(ts.f32) * r * v.astype(ts.f32)).astype(T)
    elif PRO == NORM_LATE:
        tf = t.astype(ts.f32)
        ss = ss + tf * tf
        x = (tf * v.astype(ts.f32)).astype(T)
    elif PRO == SILU_MUL:
        gate = t.astype(ts.f32)
        x = (gate * ts.sigmoid(gate) * v.astype(ts.f32)).astype(T)
    return x, ss


@ts.function
def late_scale(acc, ss, K, eps, PRO):
    """acc (BM, BN) times each row's 1 / rms (NORM_LATE), from its sums of squares ss."""
    if PRO == NORM_LATE:
        acc = acc * ts.rsqrt(ts.sum(ss, axis=1, keepdims=True) / K + eps)   # (BM, 1)
    return acc


@ts.function
def fma_tile(xt, w, BK):
    """(BK, BN) f32 products of one input row tile (1, BK) and a weight tile (BK, BN)."""
    return ts.reshape(xt.astype(ts.f32), (BK, 1)) * w.astype(ts.f32)


@ts.function
def dot_loop(pa, pu, pb, g, j, r, ss, T, BM, BK, BN, TF32, PRO):
    """(BM, BN) f32 products of the prologue's rows and the weight's column tile j on tensor
    cores, and ss plus the rows' squares (NORM_LATE)."""
    acc = ts.zeros((BM, BN), ts.f32)                             # (BM, BN)
    for k in range(ts.num_tiles(pa, 1)):
        xk, ss = late_tile(pa, pu, g, k, r, ss, T, BK, PRO)
        acc = mac(xk, pb.load((k, j)), acc, TF32)
    return acc, ss


@ts.function
def fma_loop(part, first, pa, pu, pb, g, j, r, ss, T, BK, BN, PRO):
    """(1, BN) f32: one row's products over K tiles first.. added to `part` (BK, BN) by FMAs
    (Triton pipelines the loop), and ss plus the row's squares (NORM_LATE)."""
    for k in range(first, ts.num_tiles(pa, 1)):
        xk, ss = late_tile(pa, pu, g, k, r, ss, T, BK, PRO)
        part = part + fma_tile(xk, pb.load((k, j)), BK)
    return ts.reshape(ts.sum(part, axis=0), (1, BN)), ss


@ts.function
def plus(y, r, T):
    """y + r rounded to T (both in T): the residual add of the unfused sequence."""
    return (y.astype(ts.f32) + r.astype(ts.f32)).astype(T)


@ts.kernel
def fused_skinny_kernel(c: ts.Mut["T", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], up: ts.Ref["T", ("M", "K")],
                        g: ts.Ref["TG", (-1,)], b: ts.Ref["T", ("K", "N")], bias: ts.Ref["TB", (-1,)],
                        res: ts.Ref["T", (-1, -1)], T: ts.Const[ts.DType], TG: ts.Const[ts.DType],
                        TB: ts.Const[ts.DType], PRO: ts.Const[int], RES: ts.Const[int], HAS_BIAS: ts.Const[bool],
                        ACT: ts.Const[int], TF32: ts.Const[bool], DOT: ts.Const[bool], PREFETCH: ts.Const[bool],
                        DEEP: ts.Const[bool], PEEL: ts.Const[bool], BM: ts.Const[int], BN: ts.Const[int],
                        BK: ts.Const[int], L2P: ts.Const[int], L2K: ts.Const[bool], M: int, N: int, K: int,
                        eps: float):
    """`skinny_kernel` with a prologue on x's tiles and a residual on the output tile (one row:
    PREFETCH loads weight tile k + 1 (and what x's tile k + 1 is made from: `raw_tile`) before
    k's FMAs, DEEP weight tiles k + 1 and k + 2; PEEL takes
    weight tile 0 before the pipelined loop over the others)."""
    pa, pu = a.partition((BM, BK)), up.partition((BM, BK))       # all rows of x (and up): (BM, BK)
    pb = b.partition((BK, BN))                                   # (BK, BN)
    j = ts.block_id(1)
    warm_slab(b, 0, ts.num_tiles(pb, 0), j, L2P, L2K, BK, BN)    # under PDL: before the wait
    r = row_scale(pa, eps, K, BM, BK, PRO)                       # (BM, 1)
    ss = ts.zeros((BM, BK), ts.f32)                              # (BM, BK) NORM_LATE's sums of squares
    if DOT:                                                      # 2..16 rows: tensor cores
        acc, ss = dot_loop(pa, pu, pb, g, j, r, ss, T, BM, BK, BN, TF32, PRO)
    elif DEEP:                                                   # one row, weight tiles k + 1 and k + 2 in flight
        part = ts.zeros((BK, BN), ts.f32)                        # (BK, BN) partial products
        last = ts.num_tiles(pa, 1) - 1
        wn = pb.load((0, j))                                     # the weight first: it may precede a PDL wait
        wm = pb.load((ts.minimum(last, 1), j))
        tn, vn = raw_tile(pa, pu, g, 0, BK, PRO)
        for k in range(ts.num_tiles(pa, 1)):
            tk, vk, wk = tn, vn, wn
            wn = wm
            wm = pb.load((ts.minimum(k + 2, last), j))           # past the end: the last tile again, in range
            tn, vn = raw_tile(pa, pu, g, ts.minimum(k + 1, last), BK, PRO)
            xk, ss = made_tile(tk, vk, r, ss, T, PRO)            # from loads of the step before
            part = part + fma_tile(xk, wk, BK)
        acc = ts.reshape(ts.sum(part, axis=0), (1, BN))          # (1, BN)
    elif PREFETCH:                                               # one row, K tile k + 1 loaded before k's FMAs
        part = ts.zeros((BK, BN), ts.f32)                        # (BK, BN) partial products
        last = ts.num_tiles(pa, 1) - 1
        wn = pb.load((0, j))                                     # the weight first: it may precede a PDL wait
        tn, vn = raw_tile(pa, pu, g, 0, BK, PRO)
        for k in range(ts.num_tiles(pa, 1)):
            tk, vk, wk = tn, vn, wn
            nxt = ts.minimum(k + 1, last)
            tn, vn = raw_tile(pa, pu, g, nxt, BK, PRO)           # the next step's loads, then this step's math
            wn = pb.load((nxt, j))
            xk, ss = made_tile(tk, vk, r, ss, T, PRO)            # from loads of the step before
            part = part + fma_tile(xk, wk, BK)
        acc = ts.reshape(ts.sum(part, axis=0), (1, BN))          # (1, BN)
    else:                                                        # one row: FMAs
        part = ts.zeros((BK, BN), ts.f32)                        # (BK, BN)
        first = 0
        if PEEL:                                                 # weight tile 0 first: it may precede a PDL wait
            # (not under NORM: row_scale's pass over x comes before it)
            w0 = pb.load((0, j))
            x0, ss = late_tile(pa, pu, g, 0, r, ss, T, BK, PRO)
            part = part + fma_tile(x0, w0, BK)
            first = 1
        acc, ss = fma_loop(part, first, pa, pu, pb, g, j, r, ss, T, BK, BN, PRO)   # (1, BN)
    acc = late_scale(acc, ss, K, eps, PRO)
    y = epilogue(acc, bias, j, BN, HAS_BIAS, ACT).astype(T)      # (BM, BN) what linear stores
    if RES == RES_REF:
        y = plus(y, ts.load(res, (0, j), shape=(BM, BN)), T)
    elif RES == RES_OWN:                                         # out=residual: the block's own tile
        y = plus(y, c.load(), T)
    c.store(y)


@ts.kernel
def fused_split_kernel(part: ts.Mut[ts.f32, (1, "BM", "BN")], a: ts.Ref["T", ("M", "K")],
                       up: ts.Ref["T", ("M", "K")], g: ts.Ref["TG", (-1,)], b: ts.Ref["T", ("K", "N")],
                       T: ts.Const[ts.DType], TG: ts.Const[ts.DType], PRO: ts.Const[int], TF32: ts.Const[bool],
                       DOT: ts.Const[bool], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int],
                       L2P: ts.Const[int], L2K: ts.Const[bool], PER: int, M: int, N: int, K: int, eps: float):
    """`split_k_kernel` with the prologue: split s sums K tiles [s * PER, (s + 1) * PER)."""
    pa, pu = a.partition((BM, BK)), up.partition((BM, BK))       # (BM, BK)
    pb = b.partition((BK, BN))                                   # (BK, BN)
    s, j = ts.block_id(0), ts.block_id(2)
    lo = s * PER
    hi = min(lo + PER, ts.num_tiles(pa, 1))
    warm_slab(b, lo, hi, j, L2P, L2K, BK, BN)                    # under PDL: before the wait
    r = row_scale(pa, eps, K, BM, BK, PRO)                       # (BM, 1) over the whole row
    if DOT:
        acc = ts.zeros((BM, BN), ts.f32)                         # (BM, BN)
        for k in range(lo, hi):
            acc = mac(input_tile(pa, pu, g, k, r, T, BK, PRO), pb.load((k, j)), acc, TF32)
    else:
        prod = ts.zeros((BK, BN), ts.f32)                        # (BK, BN)
        for k in range(lo, hi):
            prod = prod + fma_tile(input_tile(pa, pu, g, k, r, T, BK, PRO), pb.load((k, j)), BK)
        acc = ts.reshape(ts.sum(prod, axis=0), (1, BN))          # (1, BN)
    part.store(ts.reshape(acc, (1, BM, BN)))


@ts.kernel
def fused_sum_kernel(c: ts.Mut["T", ("BM", "BN")], part: ts.Ref[ts.f32, ("S", "M", "N")],
                     bias: ts.Ref["TB", (-1,)], res: ts.Ref["T", (-1, -1)], T: ts.Const[ts.DType],
                     TB: ts.Const[ts.DType], HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], RES: ts.Const[int],
                     BM: ts.Const[int], BN: ts.Const[int], S: int, M: int, N: int):
    """c = epilogue(sum over s of part[s]) (+ residual), as `fused_skinny_kernel` ends."""
    pp = part.partition((1, BM, BN))                             # (1, BM, BN)
    i, j = ts.block_id(0), ts.block_id(1)
    acc = ts.zeros((BM, BN), ts.f32)                             # (BM, BN)
    for s in range(ts.num_tiles(pp, 0)):
        acc = acc + ts.reshape(pp.load((s, i, j)), (BM, BN))
    y = epilogue(acc, bias, j, BN, HAS_BIAS, ACT).astype(T)
    if RES == RES_REF:
        y = plus(y, ts.load(res, (i, j), shape=(BM, BN)), T)
    elif RES == RES_OWN:
        y = plus(y, c.load(), T)
    c.store(y)


# --- public API -------------------------------------------------------------------------


@planned
def rms_norm_linear(x, norm_weight, w, eps=1e-6, out=None, config=None):
    """`linear(rms_norm(x, norm_weight, eps), w)`: x (..., K), norm_weight (K,), w (N, K).

    For M <= 16 rows one kernel: each block normalises x's rows itself (statistics in
    fp32, the normed row rounded to x's dtype as `rms_norm` stores it) while it streams its
    slab of w. Larger M runs `rms_norm` then `linear` (allocating the normed rows)."""
    fn = "rms_norm_linear"
    xt, wt = A.tensor(x, "x", fn), A.tensor(w, "w", fn)
    gt = A.tensor(norm_weight, "norm_weight", fn)
    A.dtype_in(gt, A.FLOATS, "norm_weight", fn)
    _, dtype, device = A.float_operands(fn, x=xt, w=wt)
    A.same_device(fn, x=xt, norm_weight=gt)
    k = _check_weight(fn, xt, wt, "x")
    if gt.shape != (k,):
        raise A.fail(fn, f"`norm_weight` must have shape ({k},) for x of shape {xt.shape}, got {gt.shape}",
                     help="pass the RMSNorm weight of the rows being normalised")
    if _rows(xt) > SKINNY_M or k == 0:   # K = 0: no weight slab to stream (matmul's empty-sum path)
        return linear(rms_norm(x, norm_weight, eps), w, out=out, config=config)
    return _fused(fn, A.is_torch(x), xt, None, gt, wt, None, None, None, float(eps), out, config,
                  inputs={"x": xt, "norm_weight": gt, "w": wt})


@planned
def silu_mul_linear(gate_up, w, residual=None, out=None, config=None):
    """`linear(silu(gate) * up, w)` (+ `residual`) for the packed projection
    gate_up (..., 2 I) = [gate | up] (vLLM's SiluAndMul layout) and w (N, I).

    For M <= 16 rows one kernel computes silu(gate) * up tile by tile as it streams w (the
    product rounded to gate_up's dtype, as `silu_mul` stores it). `out=residual` adds in
    place. Larger M runs `silu_mul`, then `linear` (allocating the product)."""
    fn = "silu_mul_linear"
    gt, wt = A.tensor(gate_up, "gate_up", fn), A.tensor(w, "w", fn)
    A.float_operands(fn, gate_up=gt, w=wt)
    if gt.ndim < 1 or gt.shape[-1] % 2:
        raise A.fail(fn, f"`gate_up` must be (..., 2 I) with gate and up side by side, got shape {gt.shape}",
                     help="pass the output of the packed gate/up projection")
    half = gt.shape[-1] // 2
    if wt.ndim != 2 or wt.shape[1] != half:
        raise A.fail(fn, f"`w` must be (N, {half}) for gate_up of shape {gt.shape} (I = {half}), got {wt.shape}",
                     help="pass the down projection's weight, (hidden, intermediate)")
    if _rows(gt) > SKINNY_M or half == 0:   # I = 0: no weight slab to stream (matmul's empty-sum path)
        act = silu_mul(gate_up[..., :half], gate_up[..., half:])
        return linear(act, w, residual=residual, out=out, config=config)
    return _fused(fn, A.is_torch(gate_up), gt[..., :half], gt[..., half:], None, wt, None, None, residual, 0.0,
                  out, config, inputs={"gate_up": gt, "w": wt})


@planned
def linear(x, w, bias=None, activation=None, precision=None, out=None, config=None, residual=None):
    """`activation(x @ w.T + bias)` with w of shape (N, K), as torch's F.linear; with
    `residual`, that (rounded to x's dtype) plus `residual` — `out=residual` adds in place.

    For M <= 16 rows (decode), each block owns a slab of N outputs and streams the weight
    once, looping over K tiles with an fp32 accumulator; the residual is added to each
    output tile before it is stored (`linear_residual`). (Here, not in matmul.py: its
    residual form and the fusions' unfused forms call each other; matmul.gemm is the product.)
    """
    if residual is not None:
        return linear_residual(x, w, bias, activation, residual, precision, out, config)
    fn = "linear"
    xt, wt = A.tensor(x, "x", fn), A.tensor(w, "w", fn)
    if xt.ndim < 1 or wt.ndim != 2:
        raise A.fail(fn, f"needs x of shape (..., K) and w of shape (N, K); got {xt.shape} and {wt.shape}")
    return gemm(fn, A.is_torch(x), xt, wt.T, None, bias, activation, precision, out, config, ("x", "w"))


def linear_residual(x, w, bias, activation, residual, precision, out, config):
    """`linear(..., residual=)`: the fused GEMV for M <= 16 rows, else `linear` + `residual_add`."""
    fn = "linear"
    xt, wt = A.tensor(x, "x", fn), A.tensor(w, "w", fn)
    A.float_operands(fn, x=xt, w=wt)
    k = _check_weight(fn, xt, wt, "x")
    if _rows(xt) > SKINNY_M or k == 0:   # K = 0: no weight slab to stream (matmul's empty-sum path)
        y = linear(x, w, bias=bias, activation=activation, precision=precision, config=config)
        return residual_add(y, residual, out=y if out is None else out)
    return _fused(fn, A.is_torch(x), xt, None, None, wt, bias, activation, residual, 0.0, out, config,
                  inputs={"x": xt, "w": wt}, precision=precision)


# --- dispatch -----------------------------------------------------------------------------


def _fused(fn, torch_mode, xt, upt, gt, wt, bias, activation, residual, eps, out, config, inputs, precision=None):
    """One fused GEMV (or its split-K pair) of rows xt (..., K) by wt (N, K), M <= 16."""
    dtype, device = xt.dtype, xt.device
    k, n = xt.shape[-1], wt.shape[0]
    if activation not in ACTIVATIONS:
        raise A.fail(fn, f"activation must be None, \"silu\" or \"gelu\", got {activation!r}",
                     help="apply other activations with their own call")
    o = A.output(out, xt.shape[:-1] + (n,), dtype, device, torch_mode, fn)
    rt = None
    if residual is not None:
        rt = A.tensor(residual, "residual", fn)
        A.same_dtype(fn, out=o.tensor, residual=rt)
        A.same_device(fn, out=o.tensor, residual=rt)
        if rt.shape != o.tensor.shape:
            raise A.fail(fn, f"`residual` has shape {rt.shape}, but the product is {o.tensor.shape}",
                         help="the residual is added elementwise: pass one of the output's shape")
    own = rt is not None and o.given and layout.same_view(o.tensor, rt)   # out=residual: in place
    views = layout.matrices([xt] + ([upt] if upt is not None else []) + [o.tensor]
                            + ([rt] if rt is not None and not own else []))
    if views is None:
        raise A.fail(fn, f"the leading axes of shape {xt.shape} do not merge into one", help="pass a contiguous tensor")
    av, uv, cv = views[0], views[1] if upt is not None else views[0], views[1 + (upt is not None)]
    resv = views[-1] if rt is not None and not own else av
    m = av.shape[0]
    bias_t = A.bias_vector(fn, bias, n, av) if m or bias is not None else None   # M = 0: no row 0 to stand in
    check_aliasing(fn, dict(inputs, bias=bias_t if bias is not None else None,
                            residual=rt), {"out": o.passed}, {"out": ("residual",)})
    if m == 0 or n == 0:
        return o.returned
    tag = "norm" if gt is not None else "silu" if upt is not None else "res"
    cfg = fused_config(dtype, m, n, k, config, tag, run=lambda c: linear(av, wt, config=c))
    bm, bn, bk, splits = skinny_tiles(cfg, m, n, k)
    pro = norm_prologue(dtype, splits) if gt is not None else SILU_MUL if upt is not None else PLAIN
    res = RES_OWN if own else RES_REF if rt is not None else NO_RES
    common = dict(a=av, up=uv, g=gt if gt is not None else av[0], b=wt.T, PRO=pro,
                  TF32=A.tf32(fn, dtype, precision), DOT=m > 1, eps=eps,
                  **l2_prefetch(wt.nbytes, SILU_L2_PREFETCH if pro == SILU_MUL else None))
    ending = dict(bias=bias_t, res=resv, HAS_BIAS=bias is not None, ACT=ACTIVATIONS[activation], RES=res)
    if splits > 1:
        per = cdiv(cdiv(k, bk), splits)                          # K tiles per split (skinny_tiles: none empty)
        part, = scratch.views(device, (splits, m, n))
        launch(fused_split_kernel, {"part": (part, (1, bm, bn))}, cfg=cfg, BK=bk, PER=per, pdl=True, **common)
        sm = min(pow2(m), 16)
        sn = max(16, min(pow2(n), 2048 // sm))
        launch(fused_sum_kernel, {"c": (cv, (sm, sn))}, cfg=None, part=part, pdl=True, **ending)
    else:
        ahead = prefetch_form(cfg, m, wt)                        # weight tiles loaded ahead of the FMAs
        launch(fused_skinny_kernel, {"c": (cv, (bm, bn))}, cfg=cfg, BK=bk, PREFETCH=ahead > 0, DEEP=ahead > 1,
               PEEL=ahead == 0 and peel_form(m, wt), **common, **ending)
    return o.returned


def fused_config(dtype, m: int, n: int, k: int, config, tag: str, run=None) -> dict:
    """The config of a fused GEMV of m rows by an (N, K) weight whose prologue / epilogue is
    `tag` ("norm": rms_norm_linear, "silu": silu_mul_linear, "res": linear(residual=)).
    `linear`'s config for this (N, K) (first-use tuning times the plain GEMV of the same
    operands), except that one row takes the tuned table's `<weight class>/gemv/<tag>` entry
    where the GPU measured one for this very weight and form: the prologue's loads and math
    can move the best tiles away from the plain GEMV's (benchmarks/probes/fused_gemv_probe.py).

    Why they move (H200, session 20): the prologue costs registers, so fewer blocks share an
    SM and a grid that was one wave for the plain GEMV becomes two. 8 x 512 tiles with the
    PREFETCH loop take 96 registers a thread plain (5 blocks of 128 threads an SM: 660 slots)
    and 123 with SiLU-mul (4: 528 slots), so the 640 blocks of the 32B / 14B down projections
    ran 81 / 57 us fused against 63 / 44 plain, while the pipelined loop (93 registers) ran
    66 / 46; the 8B's 512 blocks fit, and its PREFETCH form won (27.2 us). 4 x 1024 tiles:
    64 registers plain, 72 fused (8 -> 7 blocks an SM; the 8B's 1024 blocks: 35.9 us fused
    against 25.9). A model of the fused forms' residency would choose these itself."""
    cfg = skinny_config(dtype, m, n, k, config, run=run)
    if m == 1 and config is None:
        own = configs.tuned_entry("linear", f"{configs.weight_class(dtype, (), (n, k))}/gemv/{tag}")
        if own is not None:
            cfg = dict(cfg, **own)
    return cfg


def _check_weight(fn, xt, wt, name) -> int:
    """K, after checking x (..., K) against w (N, K)."""
    if xt.ndim < 1 or wt.ndim != 2 or xt.shape[-1] != wt.shape[1]:
        raise A.fail(fn, f"needs {name} of shape (..., K) and w of shape (N, K); got {xt.shape} and {wt.shape}",
                     help="w is stored (out_features, in_features), as torch's nn.Linear.weight")
    return wt.shape[1]


def _rows(t) -> int:
    m = 1
    for s in t.shape[:-1]:
        m *= s
    return m
