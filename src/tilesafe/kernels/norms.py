"""RMSNorm (optionally fused with the residual add) and LayerNorm over the last axis.

Statistics are fp32. A row of N elements is one (BM, NP) tile, NP = next_pow2(N), loaded
once: hidden sizes that are not powers of two (2560) pad with zeros, which add nothing to
the sums, and the stores past N are dropped. Rows longer than the config's `row_max` are
walked in (BM, SUB) pieces instead: a loop over column tiles for the statistics, then
`y.subtiles` to write the row piece by piece.
"""
import tilesafe as ts

from . import arguments as A
from . import configs, layout
from .call_checks import check_aliasing
from .call_plans import planned
from .elementwise import ADD, binary_inplace_kernel, binary_kernel, tile3
from .launch import launch, pow2


@ts.function
def row_vector(v, NP):
    """(1, 1, NP) fp32: a per-column vector (a weight, a bias), zeros past its end."""
    return ts.reshape(ts.load(v, (0,), shape=(NP,)).astype(ts.f32), (1, 1, NP))


@ts.function
def row_mask(NP, N):
    """(1, 1, NP): True for the columns inside the row."""
    return ts.reshape(ts.arange(0, NP) < N, (1, 1, NP))


@ts.function
def rms_rows(t, w, N, eps, T, NP):
    """(1, BM, NP) in T: the f32 rows t (zeros past N) over their rms, times the weight w."""
    wt = row_vector(w, NP)   # before the sum: overlaps it
    r = ts.rsqrt(ts.sum(t * t, axis=2, keepdims=True) / N + eps)   # (1, BM, 1)
    return (t * r * wt).astype(T)


@ts.kernel
def rms_norm_kernel(y: ts.Mut["T", (1, "BM", "NP")], x: ts.Ref["T", ("NA", "NB", "N")], w: ts.Ref["TW", ("N",)],
                    T: ts.Const[ts.DType], TW: ts.Const[ts.DType], BM: ts.Const[int], NP: ts.Const[int],
                    NA: int, NB: int, N: int, eps: float):
    t = ts.load_tile_like(x, y).astype(ts.f32)                   # (1, BM, NP), zeros past N
    y.store(rms_rows(t, w, N, eps, T, NP))


@ts.kernel
def add_rms_norm_kernel(y: ts.Mut["T", (1, "BM", "NP")], h: ts.Mut["T", (1, "BM", "NP")],
                        x: ts.Ref["T", ("NA", "NB", "N")], res: ts.Ref["T", ("NA", "NB", "N")],
                        w: ts.Ref["TW", ("N",)], T: ts.Const[ts.DType], TW: ts.Const[ts.DType],
                        BM: ts.Const[int], NP: ts.Const[int], NA: int, NB: int, N: int, eps: float):
    # The sum is rounded to T before it is normalised, as `x + residual` then RMSNorm in torch.
    s = (ts.load_tile_like(x, y).astype(ts.f32) + ts.load_tile_like(res, y).astype(ts.f32)).astype(T)
    h.store(s)                                                   # (1, BM, NP)
    t = s.astype(ts.f32)
    y.store(rms_rows(t, w, N, eps, T, NP))


@ts.kernel
def add_rms_norm_inplace_kernel(y: ts.Mut["T", (1, "BM", "NP")], h: ts.Mut["T", (1, "BM", "NP")],
                                x: ts.Ref["T", ("NA", "NB", "N")], w: ts.Ref["TW", ("N",)], T: ts.Const[ts.DType],
                                TW: ts.Const[ts.DType], BM: ts.Const[int], NP: ts.Const[int], NA: int, NB: int,
                                N: int, eps: float):
    """As add_rms_norm_kernel with `h` the residual itself: each block reads back its own rows."""
    s = (ts.load_tile_like(x, y).astype(ts.f32) + h.load().astype(ts.f32)).astype(T)   # (1, BM, NP)
    h.store(s)
    t = s.astype(ts.f32)
    y.store(rms_rows(t, w, N, eps, T, NP))


@ts.kernel
def layer_norm_kernel(y: ts.Mut["T", (1, "BM", "NP")], x: ts.Ref["T", ("NA", "NB", "N")], w: ts.Ref["TW", ("N",)],
                      b: ts.Ref["TW", ("N",)], T: ts.Const[ts.DType], TW: ts.Const[ts.DType], HAS_B: ts.Const[bool],
                      EVEN: ts.Const[bool], BM: ts.Const[int], NP: ts.Const[int], NA: int, NB: int, N: int,
                      eps: float):
    t = ts.load_tile_like(x, y).astype(ts.f32)                   # (1, BM, NP)
    wt = row_vector(w, NP)   # before the sums: overlaps them
    bt = row_vector(b, NP) if HAS_B else wt
    mean = ts.sum(t, axis=2, keepdims=True) / N                  # (1, BM, 1)
    d = t - mean                                                 # (1, BM, NP) centred
    if not EVEN:   # rows shorter than the tile: the zero padding, centred, must not add to the variance
        d = ts.where(row_mask(NP, N), d, 0.0)
    r = ts.rsqrt(ts.sum(d * d, axis=2, keepdims=True) / N + eps)
    out = d * r * wt
    if HAS_B:
        out = out + bt
    y.store(out.astype(T))


@ts.kernel
def long_norm_kernel(y: ts.Mut["T", (1, "BM", "NP")], x: ts.Ref["T", ("NA", "NB", "N")], w: ts.Ref["TW", ("N",)],
                     b: ts.Ref["TW", ("N",)], T: ts.Const[ts.DType], TW: ts.Const[ts.DType], LAYER: ts.Const[bool],
                     HAS_B: ts.Const[bool], BM: ts.Const[int], NP: ts.Const[int], SUB: ts.Const[int],
                     NA: int, NB: int, N: int, eps: float):
    """RMSNorm (LAYER=False) or LayerNorm of rows too long for one tile, in (1, BM, SUB) pieces."""
    px = x.partition((1, BM, SUB))                               # row pieces: (1, BM, SUB)
    pw, pb = w.partition((SUB,)), b.partition((SUB,))            # weight pieces: (SUB,)
    a, i = ts.block_id(0), ts.block_id(1)
    mean = ts.zeros((1, BM, 1), ts.f32)                          # (1, BM, 1)
    if LAYER:
        acc = ts.zeros((1, BM, SUB), ts.f32)
        for k in range(ts.num_tiles(px, 2)):
            acc = acc + px.load((a, i, k)).astype(ts.f32)
        mean = ts.sum(acc, axis=2, keepdims=True) / N
    ss = ts.zeros((1, BM, SUB), ts.f32)                          # (1, BM, SUB) sum of squares
    for k in range(ts.num_tiles(px, 2)):
        cols = ts.reshape(k * SUB + ts.arange(0, SUB) < N, (1, 1, SUB))
        d = ts.where(cols, px.load((a, i, k)).astype(ts.f32) - mean, 0.0)
        ss = ss + d * d
    r = ts.rsqrt(ts.sum(ss, axis=2, keepdims=True) / N + eps)    # (1, BM, 1)
    for j in y.subtiles((1, BM, SUB)):
        t = (px.load((a, i, j[2])).astype(ts.f32) - mean) * r    # (1, BM, SUB)
        out = t * ts.reshape(pw.load((j[2],)).astype(ts.f32), (1, 1, SUB))
        if HAS_B:
            out = out + ts.reshape(pb.load((j[2],)).astype(ts.f32), (1, 1, SUB))
        y.store(out.astype(T), j)


# --- public API -------------------------------------------------------------------------


@planned
def rms_norm(x, w, eps=1e-6, residual=None, out=None, residual_out=None, config=None):
    """RMSNorm over the last axis: `x / sqrt(mean(x**2) + eps) * w`, statistics in fp32.

    With `residual`, first forms `h = x + residual` (rounded to x's dtype), normalises h
    and returns `(y, h)` — the fused add + norm of a transformer block. `residual_out=residual`
    updates the residual stream in place.
    """
    fn = "rms_norm"
    torch_mode, xt, wt, dtype = _inputs(fn, x, w)
    shape = xt.shape
    inputs = {"x": xt}
    if residual is not None:
        inputs["residual"] = A.tensor(residual, "residual", fn)
        A.same_dtype(fn, **inputs)
        A.same_device(fn, **inputs)
        if inputs["residual"].shape != shape:
            raise A.fail(fn, f"`residual` has shape {inputs['residual'].shape}, x has {shape}")
    y = A.output(out, shape, dtype, xt.device, torch_mode, fn)
    outs = {"y": y}
    if residual is not None:
        outs["h"] = A.output(residual_out, shape, dtype, xt.device, torch_mode, fn, "residual_out")
    # The whole call, before its first launch (long rows run two): only residual_out=residual.
    passed = {"out": y.passed, "residual_out": outs["h"].passed if residual is not None else None}
    check_aliasing(fn, dict(inputs, w=wt), passed, {"residual_out": ("residual",)})
    result = (y.returned, outs["h"].returned) if residual is not None else y.returned
    if y.tensor.numel == 0:
        return result
    # residual_out=residual updates the residual stream in place (h reads back its own rows).
    inplace = residual is not None and layout.same_view(outs["h"].tensor, inputs["residual"])
    if inplace:
        inputs.pop("residual")
    ins, os_ = A.row_views(fn, list(inputs.values()), [o.tensor for o in outs.values()], shape)
    cfg, bm, npow = _tiles(fn, ins[0], dtype, config)
    eps = float(eps)
    if npow > cfg["row_max"]:
        if residual is not None:
            # Long rows: the add, then the norm (two passes over memory instead of one).
            h_tile = tile3(os_[1].shape, cfg["sub"])
            if inplace:
                launch(binary_inplace_kernel, {"z": (os_[1], h_tile)}, cfg=cfg, y=ins[0], OP=ADD)
            else:
                launch(binary_kernel, {"z": (os_[1], h_tile)}, cfg=cfg, x=ins[0], y=ins[1], OP=ADD)
            ins = [os_[1]]
        _long(os_[0], ins[0], wt, wt, False, False, cfg, bm, eps)
    elif residual is None:
        launch(rms_norm_kernel, {"y": (os_[0], (1, bm, npow))}, cfg=cfg, x=ins[0], w=wt, eps=eps)
    elif inplace:
        launch(add_rms_norm_inplace_kernel, {"y": (os_[0], (1, bm, npow)), "h": (os_[1], (1, bm, npow))},
               cfg=cfg, x=ins[0], w=wt, eps=eps)
    else:
        launch(add_rms_norm_kernel, {"y": (os_[0], (1, bm, npow)), "h": (os_[1], (1, bm, npow))},
               cfg=cfg, x=ins[0], res=ins[1], w=wt, eps=eps)
    return result


@planned
def layer_norm(x, w, b=None, eps=1e-5, out=None, config=None):
    """LayerNorm over the last axis: `(x - mean) / sqrt(var + eps) * w + b`, statistics in fp32."""
    fn = "layer_norm"
    torch_mode, xt, wt, dtype = _inputs(fn, x, w)
    bt = wt
    if b is not None:
        bt = A.tensor(b, "b", fn)
        A.same_dtype(fn, w=wt, b=bt)
        A.same_device(fn, x=xt, b=bt)
        if bt.shape != wt.shape:
            raise A.fail(fn, f"`b` has shape {bt.shape}, but `w` has {wt.shape}")
    shape = xt.shape
    y = A.output(out, shape, dtype, xt.device, torch_mode, fn)
    check_aliasing(fn, {"x": xt, "w": wt, "b": bt if b is not None else None}, {"out": y.passed})
    if y.tensor.numel == 0:
        return y.returned
    (xv,), (yv,) = A.row_views(fn, [xt], [y.tensor], shape)
    cfg, bm, npow = _tiles(fn, xv, dtype, config)
    if npow > cfg["row_max"]:
        _long(yv, xv, wt, bt, True, b is not None, cfg, bm, float(eps))
    else:
        launch(layer_norm_kernel, {"y": (yv, (1, bm, npow))}, cfg=cfg, x=xv, w=wt, b=bt, HAS_B=b is not None,
               EVEN=shape[-1] == npow, eps=float(eps))
    return y.returned


# --- helpers --------------------------------------------------------------------------------


def _inputs(fn, x, w):
    torch_mode = A.is_torch(x)
    xt, wt = A.tensor(x, "x", fn), A.tensor(w, "w", fn)
    dtype = A.dtype_in(xt, A.FLOATS, "x", fn)
    A.dtype_in(wt, A.FLOATS, "w", fn)
    A.same_device(fn, x=xt, w=wt)
    if xt.ndim == 0 or wt.shape != (xt.shape[-1],):
        raise A.fail(fn, f"`w` must have shape (N,) for x of shape (..., N); got w {wt.shape} and x {xt.shape}")
    return torch_mode, xt, wt, dtype




def _tiles(fn, xv, dtype, config):
    n = xv.shape[2]
    cfg = configs.lookup("rows", configs.shape_class(dtype, n), config, dtype)
    npow = pow2(n)
    bm = min(pow2(xv.shape[1]), cfg["block_m"], max(1, cfg["row_elems"] // npow))
    return cfg, bm, npow


def _long(yv, xv, wt, bt, layer, has_b, cfg, bm, eps):
    npow = pow2(xv.shape[2])
    sub = min(cfg["sub"], npow)
    bm = min(bm, max(1, cfg["row_elems"] // sub))
    launch(long_norm_kernel, {"y": (yv, (1, bm, npow))}, cfg=cfg, x=xv, w=wt, b=bt, LAYER=layer, HAS_B=has_b,
           SUB=sub, eps=eps)

