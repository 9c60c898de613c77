"""`linear_argmax`: greedy decoding's LM head — the argmax of x @ w.T per row, and the
log-probability of it — without writing the logits.

Two launches per (at most) 16 rows:
  1. the weight-streaming GEMV of `linear` (with `rms_norm_linear`'s one-launch norm
     prologue, `linear_fusions.norm_prologue`, when `norm_weight` is given); block j rounds
     its BN logits to x's dtype, as `linear` stores them, and keeps of each row their
     maximum, the first column holding it and sum(exp(logit - maximum)) — three floats per
     (row, block) in the device's scratch (a column index as f32 is exact below 2**24, far
     above any vocabulary);
  2. one block per row walks those: the overall maximum, the least column among the blocks
     reaching it (ties go to the lowest index, as torch.argmax), and Z = sum over blocks of
     sum_b * exp(max_b - max), so the chosen token's log-probability is -log(Z).
The result equals `argmax(linear(x, w))` and `log_softmax(linear(x, w))` at it, with the
logits' 4 * vocabulary bytes per row never written or read back.
"""
import tilesafe as ts

from . import arguments as A
from . import layout, scratch
from .call_checks import check_aliasing
from .call_plans import planned
from .launch import cdiv, launch, pow2
from .linear_fusions import PLAIN, dot_loop, fma_loop, late_scale, norm_prologue, row_scale
from .matmul import SKINNY_M, l2_prefetch, skinny_config, skinny_tiles, warm_slab

NEG_INF = -float("inf")
EXACT_INDEX = 1 << 24          # columns below this are exact as f32
BLOCK_R = 4096                 # the final pass's tile over a row's blocks


@ts.kernel
def argmax_gemv_kernel(best: ts.Mut[ts.f32, ("BM", 1)], at: ts.Mut[ts.f32, ("BM", 1)],
                       mass: ts.Mut[ts.f32, ("BM", 1)], a: ts.Ref["T", ("M", "K")], g: ts.Ref["TG", (-1,)],
                       b: ts.Ref["T", ("K", "N")], T: ts.Const[ts.DType], TG: ts.Const[ts.DType],
                       PRO: ts.Const[int], TF32: ts.Const[bool], DOT: ts.Const[bool], BM: ts.Const[int],
                       BN: ts.Const[int], BK: ts.Const[int], L2P: ts.Const[int], L2K: ts.Const[bool], M: int,
                       N: int, K: int, eps: float):
    """Block j: logits of columns j*BN.. for every row, reduced to (max, first column, mass)."""
    pa = a.partition((BM, BK))                                   # all rows of x: (BM, BK)
    pb = b.partition((BK, BN))                                   # (BK, BN)
    j = ts.block_id(1)
    warm_slab(b, 0, ts.num_tiles(pb, 0), j, L2P, L2K, BK, BN)    # under PDL: before the wait
    r = row_scale(pa, eps, K, BM, BK, PRO)                       # (BM, 1)
    ss = ts.zeros((BM, BK), ts.f32)                              # (BM, BK) NORM_LATE's sums of squares
    if DOT:
        acc, ss = dot_loop(pa, pa, pb, g, j, r, ss, T, BM, BK, BN, TF32, PRO)            # (BM, BN)
    else:
        acc, ss = fma_loop(ts.zeros((BK, BN), ts.f32), 0, pa, pa, pb, g, j, r, ss, T, BK, BN, PRO)   # (1, BN)
    acc = late_scale(acc, ss, K, eps, PRO)
    cols = ts.reshape(j * BN + ts.arange(0, BN), (1, BN))        # (1, BN) column of each logit
    v = ts.where(cols < N, acc.astype(T).astype(ts.f32), NEG_INF)   # (BM, BN) the logits linear stores
    m = ts.max(v, axis=1, keepdims=True)                         # (BM, 1)
    first = ts.min(ts.where(v == m, cols, N), axis=1, keepdims=True)   # (BM, 1) ties: the lowest column
    best.store(m)
    at.store(first.astype(ts.f32))
    mass.store(ts.sum(ts.exp(v - m), axis=1, keepdims=True))     # >= 1: the maximum's own term


@ts.kernel
def argmax_rows_kernel(tok: ts.Mut[ts.i32, (1,)], logprob: ts.Mut[ts.f32, (1,)], best: ts.Ref[ts.f32, ("M", "NB")],
                       at: ts.Ref[ts.f32, ("M", "NB")], mass: ts.Ref[ts.f32, ("M", "NB")], BR: ts.Const[int],
                       M: int, NB: int):
    """Row i: the blocks' maxima combined, in two walks over them (a few KB, from L2)."""
    i = ts.block_id(0)
    lanes = ts.arange(0, BR)                                     # (BR,)
    top = ts.full((BR,), NEG_INF, ts.f32)
    for t in range((NB + BR - 1) // BR):
        top = ts.maximum(top, ts.reshape(ts.load(best, (i, t), shape=(1, BR), padding=NEG_INF), (BR,)))
    m = ts.max(top)                                              # the row's largest logit
    first = ts.full((BR,), EXACT_INDEX, ts.f32)
    z = ts.zeros((BR,), ts.f32)
    for t in range((NB + BR - 1) // BR):
        inb = t * BR + lanes < NB
        v = ts.reshape(ts.load(best, (i, t), shape=(1, BR), padding=NEG_INF), (BR,))
        col = ts.reshape(ts.load(at, (i, t), shape=(1, BR)), (BR,))
        s = ts.reshape(ts.load(mass, (i, t), shape=(1, BR)), (BR,))
        first = ts.minimum(first, ts.where(inb & (v == m), col, EXACT_INDEX))
        z = z + ts.where(inb, s * ts.exp(v - m), 0.0)
    tok.store(ts.full((1,), ts.min(first).astype(ts.i32), ts.i32))
    logprob.store(ts.full((1,), -ts.log(ts.sum(z)), ts.f32))


# --- public API -------------------------------------------------------------------------


@planned
def linear_argmax(x, w, norm_weight=None, eps=1e-6, out=None, logprobs_out=None, config=None):
    """Greedy decoding's LM head: for x (..., K) and w (N, K), the index of the largest
    logit of `linear(x, w)` per row (i32, shape x.shape[:-1]; ties go to the lowest index,
    as torch.argmax) and its log-probability `log_softmax(linear(x, w))` there (f32), with
    the logits never written. With `norm_weight` (K,), the logits are those of
    `rms_norm_linear(x, norm_weight, w, eps)`. Returns `(ids, logprobs)`; `out=` and
    `logprobs_out=` take preallocated results (a call inside `ts.graph()` passes both).
    Rows are taken 16 at a time (each pass streams w once)."""
    fn = "linear_argmax"
    torch_mode = A.is_torch(x)
    xt = A.tensor(x, "x", fn, differentiable=False)
    wt = A.tensor(w, "w", fn, differentiable=False)
    _, dtype, device = A.float_operands(fn, x=xt, w=wt)
    if xt.ndim < 1 or wt.ndim != 2 or xt.shape[-1] != wt.shape[1]:
        raise A.fail(fn, f"needs x of shape (..., K) and w of shape (N, K); got {xt.shape} and {wt.shape}",
                     help="w is the LM head's weight, (vocabulary, hidden)")
    (n, k), inputs = wt.shape, {"x": xt, "w": wt}
    if not 0 < n < EXACT_INDEX:
        raise A.fail(fn, f"w has {n} rows (the vocabulary); this function takes 1 to {EXACT_INDEX - 1}",
                     help="use linear, then argmax, for wider outputs")
    if k == 0:   # an empty product has no weight slab to stream (every logit would be 0)
        raise A.fail(fn, f"x and w have K = 0 features (x {xt.shape}, w {wt.shape}): every logit would be 0",
                     help="pass rows with at least one feature")
    if norm_weight is not None:
        gt = inputs["norm_weight"] = A.tensor(norm_weight, "norm_weight", fn, differentiable=False)
        A.dtype_in(gt, A.FLOATS, "norm_weight", fn)
        A.same_device(fn, x=xt, norm_weight=gt)
        if gt.shape != (k,):
            raise A.fail(fn, f"`norm_weight` must have shape ({k},) for x of shape {xt.shape}, got {gt.shape}",
                         help="pass the final RMSNorm's weight")
    o = A.output(out, xt.shape[:-1], ts.i32, device, torch_mode, fn)
    lo = A.output(logprobs_out, xt.shape[:-1], ts.f32, device, torch_mode, fn, name="logprobs_out")
    check_aliasing(fn, inputs, {"out": o.passed, "logprobs_out": lo.passed})
    m = o.tensor.numel
    if m == 0:
        return o.returned, lo.returned
    views = layout.matrices([xt, *(layout.strided(t, t.shape + (1,), t.strides + (1,)) for t in (o.tensor, lo.tensor))])
    if views is None:
        raise A.fail(fn, f"the leading axes of x {xt.shape} do not merge into one", help="pass a contiguous x")
    xv, ov, lv = views[0], views[1][:, 0], views[2][:, 0]
    cfg = skinny_config(dtype, min(m, SKINNY_M), n, k, config)
    for s in range(0, m, SKINNY_M):
        e = min(m, s + SKINNY_M)
        _rows(xv[s:e], wt, inputs.get("norm_weight"), eps, ov[s:e], lv[s:e], cfg, dtype)
    return o.returned, lo.returned


def _rows(xv, wt, gt, eps, ov, lv, cfg, dtype):
    """The two launches for rows xv (m <= 16, K) into ids ov (m,) and log-probabilities lv (m,)."""
    (m, k), n = xv.shape, wt.shape[0]
    bm, bn, bk, _ = skinny_tiles(cfg, m, n, k)        # no split-K: the vocabulary gives blocks enough
    nb = cdiv(n, bn)
    best, at, mass = scratch.views(xv.device, (m, nb), (m, nb), (m, nb))
    launch(argmax_gemv_kernel, {"best": (best, (bm, 1)), "at": (at, (bm, 1)), "mass": (mass, (bm, 1))}, cfg=cfg,
           a=xv, g=gt if gt is not None else xv[0], b=wt.T,
           PRO=PLAIN if gt is None else norm_prologue(dtype, 1),
           TF32=A.tf32("linear_argmax", dtype, None), DOT=m > 1, BN=bn, BK=bk, eps=float(eps), pdl=True,
           **l2_prefetch(wt.nbytes))
    # Programmatic dependent launch, as a split-K pair: the rows' pass launches while the GEMV ends.
    launch(argmax_rows_kernel, {"tok": (ov, (1,)), "logprob": (lv, (1,))}, cfg=None, best=best, at=at, mass=mass,
           BR=min(BLOCK_R, pow2(nb)), pdl=True)
