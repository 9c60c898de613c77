"""Row reductions: `sum, max, mean`, `softmax` and `log_softmax` over one axis (`axis=` or
torch's `dim=`; the last by default), read through a view that moves it last.

A tensor of shape (*lead, N) is shown to the kernels as (A, B, N) rows (`layout.rows3`).
Reductions walk a row in (BM, BN) column tiles and accumulate in fp32. Softmax loads a
whole row as one (BM, NP) tile when NP = next_pow2(N) is small enough; longer rows (a
vocabulary) take two kernels: statistics (an online max and sum) per row and chunk of
columns, as many chunks as keep the GPU busy when rows are few, then an elementwise pass
over (BM, BN) tiles that every block can take, combining its rows' chunks. Ragged rows are padded
with -inf for max and softmax, so the padding never wins and adds exp(-inf) = 0.
"""
import builtins

import tilesafe as ts

from . import arguments as A
from . import configs, scratch
from .call_checks import check_aliasing
from .call_plans import planned
from .launch import cdiv, launch, pow2

SUM, MAX, MEAN = 0, 1, 2
NEG_INF = -float("inf")


@ts.kernel
def reduce_kernel(z: ts.Mut["T", (1, "BM")], x: ts.Ref["T", ("NA", "NB", "N")], T: ts.Const[ts.DType],
                  OP: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int], NA: int, NB: int, N: int):
    px = x.partition((1, BM, BN))                                # row pieces: (1, BM, BN)
    a, i = ts.block_id(0), ts.block_id(1)
    if OP == MAX:
        acc = ts.full((1, BM, BN), NEG_INF, ts.f32)              # (1, BM, BN) running max
        for k in range(ts.num_tiles(px, 2)):
            acc = ts.maximum(acc, px.load((a, i, k), padding=NEG_INF).astype(ts.f32))
        r = ts.max(acc, axis=2)                                  # (1, BM)
    else:
        acc = ts.zeros((1, BM, BN), ts.f32)                      # (1, BM, BN) running sum
        for k in range(ts.num_tiles(px, 2)):
            acc = acc + px.load((a, i, k)).astype(ts.f32)
        r = ts.sum(acc, axis=2)                                  # (1, BM)
        if OP == MEAN:
            r = r / N
    z.store(r.astype(T))


@ts.kernel
def softmax_kernel(y: ts.Mut["T", (1, "BM", "NP")], x: ts.Ref["T", ("NA", "NB", "N")], T: ts.Const[ts.DType],
                   LOG: ts.Const[bool], BM: ts.Const[int], NP: ts.Const[int], NA: int, NB: int, N: int):
    t = ts.load_tile_like(x, y, padding=NEG_INF).astype(ts.f32)  # (1, BM, NP), -inf past column N
    m = ts.max(t, axis=2, keepdims=True)                         # (1, BM, 1)
    e = ts.exp(t - m)                                            # (1, BM, NP)
    s = ts.sum(e, axis=2, keepdims=True)                         # (1, BM, 1)
    if LOG:
        r = t - m - ts.log(s)
    else:
        r = e / s
    y.store(r.astype(T))


@ts.kernel
def row_stats_kernel(mx: ts.Mut[ts.f32, (1, "BM", 1)], sm: ts.Mut[ts.f32, (1, "BM", 1)],
                     x: ts.Ref["T", ("NA", "NB", "N")], T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int],
                     PER: int, NA: int, NB: int, N: int):
    """Per row and chunk c of PER column tiles: the max and the sum of exp(x - max) over the
    chunk, by an online pass. Chunks let a few long rows (a vocabulary) use many blocks."""
    px = x.partition((1, BM, BN))                                # (1, BM, BN)
    a, i, c = ts.block_id(0), ts.block_id(1), ts.block_id(2)
    m = ts.full((1, BM, 1), NEG_INF, ts.f32)                     # (1, BM, 1) running max
    s = ts.zeros((1, BM, 1), ts.f32)                             # (1, BM, 1) running sum
    for k in range(c * PER, min((c + 1) * PER, ts.num_tiles(px, 2))):
        t = px.load((a, i, k), padding=NEG_INF).astype(ts.f32)   # (1, BM, BN)
        m_new = ts.maximum(m, ts.max(t, axis=2, keepdims=True))
        # A row whose max is still -inf has added nothing: keep its sum at 0 (no inf - inf).
        alpha = ts.where(m_new == NEG_INF, 0.0, ts.exp(m - m_new))
        p = ts.where(m_new == NEG_INF, 0.0, ts.exp(t - m_new))
        s = s * alpha + ts.sum(p, axis=2, keepdims=True)
        m = m_new
    mx.store(m)
    sm.store(s)


@ts.kernel
def softmax_apply_kernel(y: ts.Mut["T", (1, "BM", "BN")], x: ts.Ref["T", ("NA", "NB", "N")],
                         mx: ts.Ref[ts.f32, ("NA", "NB", "C")], sm: ts.Ref[ts.f32, ("NA", "NB", "C")],
                         T: ts.Const[ts.DType], LOG: ts.Const[bool], BM: ts.Const[int], BN: ts.Const[int],
                         CP: ts.Const[int], NA: int, NB: int, N: int, C: int):
    """Each block combines its rows' C chunk statistics (CP = next_pow2(C)), then normalises its tile.
    The statistics load first: Triton then converts the small (1, BM, 1) results to the tile's
    layout, not the whole tile to theirs and back (133 barriers instead of 9 on sm_90)."""
    a, i = ts.block_id(0), ts.block_id(1)
    mc = ts.load(mx, (a, i, 0), shape=(1, BM, CP), padding=NEG_INF)   # (1, BM, CP)
    sc = ts.load(sm, (a, i, 0), shape=(1, BM, CP), padding=0.0)
    m = ts.max(mc, axis=2, keepdims=True)                        # (1, BM, 1) the row's max
    s = ts.sum(ts.where(mc == NEG_INF, 0.0, sc * ts.exp(mc - m)), axis=2, keepdims=True)
    t = ts.load_tile_like(x, y).astype(ts.f32)                   # (1, BM, BN)
    if LOG:
        r = t - m - ts.log(s)
    else:
        r = ts.exp(t - m) / s
    y.store(r.astype(T))


# --- public API -------------------------------------------------------------------------


def sum(x, axis=None, out=None, config=None, *, dim=None):
    """Sum over `axis` (or `dim=`, as in torch; default the last), fp32 accumulation, result
    in x's dtype. `ts.kernels.sum(x, dim=0)`"""
    return _reduce("sum", SUM, x, axis, dim, out, config)


def max(x, axis=None, out=None, config=None, *, dim=None):
    """Maximum over `axis` (or `dim=`; default the last). Values only, no indices."""
    return _reduce("max", MAX, x, axis, dim, out, config)


def mean(x, axis=None, out=None, config=None, *, dim=None):
    """Mean over `axis` (or `dim=`; default the last), fp32 accumulation."""
    return _reduce("mean", MEAN, x, axis, dim, out, config)


@planned
def softmax(x, dim=None, out=None, config=None, *, axis=None):
    """Softmax over `dim` (or `axis=`; default the last), in fp32, rounded once to x's dtype."""
    return _softmax("softmax", False, x, dim, axis, out, config)


@planned
def log_softmax(x, dim=None, out=None, config=None, *, axis=None):
    """log(softmax(x)) over `dim` (default the last), computed as x - max - log(sum(exp(x - max)))."""
    return _softmax("log_softmax", True, x, dim, axis, out, config)


# --- dispatch -----------------------------------------------------------------------------


def _rows_input(fn, x):
    torch_mode = A.is_torch(x)
    xt = A.tensor(x, "x", fn)
    dtype = A.dtype_in(xt, A.FLOATS, "x", fn)
    if xt.ndim == 0:
        raise A.fail(fn, "needs a tensor with at least one axis")
    return torch_mode, xt, dtype


def _reduce(fn, op, x, axis, dim, out, config):
    torch_mode, xt, dtype = _rows_input(fn, x)
    given = xt.shape
    xt, _ = A.axis_last(fn, xt, axis, dim)    # reduce the last axis of a permuted view
    shape = xt.shape
    if op == MAX and shape[-1] == 0:          # sum and mean of nothing are torch's 0 and NaN
        raise A.fail(fn, f"the axis reduced is empty (x of shape {given}): a maximum of no elements has no value",
                     help="reduce a non-empty axis (torch.max refuses an empty one too)")
    o = A.output(out, shape[:-1], dtype, xt.device, torch_mode, fn)
    check_aliasing(fn, {"x": xt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    (xv,), (zv,) = A.row_views(fn, [xt], [o.tensor], shape)
    cfg = configs.lookup("reduce", configs.shape_class(dtype, shape[-1]), config, dtype)
    bm = min(cfg["block_m"], pow2(xv.shape[1]))
    bn = min(cfg["block_n"], pow2(xv.shape[2]))
    launch(reduce_kernel, {"z": (zv, (1, bm))}, cfg=cfg, x=xv, OP=op, BN=bn)
    return o.returned


def _softmax(fn, log, x, dim, axis, out, config):
    torch_mode, xt, dtype = _rows_input(fn, x)
    rows, at = A.axis_last(fn, xt, axis, dim)   # rows along `dim`: x and out permuted alike
    o = A.output(out, xt.shape, dtype, xt.device, torch_mode, fn)
    check_aliasing(fn, {"x": xt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    shape = rows.shape
    (xv,), (yv,) = A.row_views(fn, [rows], [A.moved_last(o.tensor, at)], shape)
    cfg = configs.lookup("rows", configs.shape_class(dtype, shape[-1]), config, dtype)
    n, npow = shape[-1], pow2(shape[-1])
    if npow <= cfg["row_max"]:
        bm = min(pow2(xv.shape[1]), cfg["block_m"], builtins.max(1, cfg["row_elems"] // npow))
        launch(softmax_kernel, {"y": (yv, (1, bm, npow))}, cfg=cfg, x=xv, LOG=log)
        return o.returned
    # Long rows: statistics per row and chunk of columns (in the device's scratch), then an
    # elementwise pass over column tiles that combines each row's chunks.
    # A tile holds at most row_elems values (a 16 x 2048 fp32 tile spills its registers), and
    # chunks are added until about target_blocks blocks stream the rows.
    sub = builtins.min(cfg["sub"], pow2(n))
    bm = builtins.min(pow2(xv.shape[1]), cfg["block_m"], builtins.max(1, cfg["row_elems"] // sub))
    tiles = cdiv(n, sub)
    row_blocks = xv.shape[0] * cdiv(xv.shape[1], bm)
    chunks = builtins.max(1, builtins.min(tiles, cfg["max_chunks"], cdiv(cfg["target_blocks"], row_blocks)))
    per = cdiv(tiles, chunks)
    chunks = cdiv(tiles, per)                                    # no empty chunk
    shape = (*xv.shape[:2], chunks)
    stats = scratch.views(xv.device, shape, shape)
    launch(row_stats_kernel, {"mx": (stats[0], (1, bm, 1)), "sm": (stats[1], (1, bm, 1))}, cfg=cfg, x=xv, BN=sub,
           PER=per, pdl=True)
    # The statistics read the columns' chunks in order (axis 1 varies fastest), so the pass
    # walks them back from the far end: its first tiles are the ones still in L2.
    apply_cfg = dict(cfg, reverse_blocks=(1, 2)) if cfg["reverse_pass"] else cfg
    launch(softmax_apply_kernel, {"y": (yv, (1, bm, sub))}, cfg=apply_cfg, x=xv, mx=stats[0], sm=stats[1], LOG=log,
           CP=pow2(chunks), pdl=True)
    return o.returned

