"""`norm_rope`: per-head RMSNorm then rotate-half RoPE in one kernel (Qwen3's q/k norm).

Qwen3 normalises each head of q and k over head_dim, then rotates it. Done as `rms_norm`
then `rope` that is two launches and a round trip of the heads through memory per tensor;
here one block loads both halves of its heads once, normalises them (the sum of squares
spans both halves), rounds to the tensor's dtype as the separate `rms_norm` does, rotates
and stores: the result is `rope(rms_norm(x, weight, eps), positions, theta)` up to the order
in which the sum of squares is added (two half-rows here).
Tiles and config are `rope`'s.
"""
import tilesafe as ts

from . import arguments as A
from .call_checks import check_aliasing
from .call_plans import planned
from .launch import launch
from .rope import log2_theta, rope_tiles


@ts.kernel
def norm_rope_kernel(y1: ts.Mut["T", ("BT", "BH", "HP")], y2: ts.Mut["T", ("BT", "BH", "HP")],
                     x1: ts.Ref["T", ("NT", "NH", "HALF")], x2: ts.Ref["T", ("NT", "NH", "HALF")],
                     w1: ts.Ref["TW", ("HALF",)], w2: ts.Ref["TW", ("HALF",)], pos: ts.Ref["TP", ("NT",)],
                     T: ts.Const[ts.DType], TW: ts.Const[ts.DType], TP: ts.Const[ts.DType], BT: ts.Const[int],
                     BH: ts.Const[int], HP: ts.Const[int], NT: int, NH: int, HALF: int, eps: float,
                     log2_theta: float):
    a = ts.load_tile_like(x1, y1).astype(ts.f32)                            # (BT, BH, HP) first half, 0-padded
    b = ts.load_tile_like(x2, y1).astype(ts.f32)                            # (BT, BH, HP) second half
    wa = ts.reshape(ts.load(w1, (0,), shape=(HP,)).astype(ts.f32), (1, 1, HP))
    wb = ts.reshape(ts.load(w2, (0,), shape=(HP,)).astype(ts.f32), (1, 1, HP))
    ss = ts.sum(a * a, axis=2, keepdims=True) + ts.sum(b * b, axis=2, keepdims=True)   # (BT, BH, 1)
    r = ts.rsqrt(ss / (2 * HALF) + eps)
    a = (a * r * wa).astype(T).astype(ts.f32)                               # rounded as rms_norm's output
    b = (b * r * wb).astype(T).astype(ts.f32)
    p = ts.load(pos, (ts.block_id(0),), shape=(BT,)).astype(ts.f32)         # (BT,) positions
    e = ts.arange(0, HP).astype(ts.f32) * 2.0 / (2 * HALF)                   # (HP,) 2i / head_dim
    inv_freq = ts.exp2(-e * log2_theta)                                      # (HP,) theta^(-2i/D)
    angle = ts.reshape(p, (BT, 1, 1)) * ts.reshape(inv_freq, (1, 1, HP))    # (BT, 1, HP)
    c, s = ts.cos(angle), ts.sin(angle)
    y1.store((a * c - b * s).astype(T))
    y2.store((b * c + a * s).astype(T))


@planned
def norm_rope(x, weight, positions, eps=1e-6, theta=1e6, out=None, config=None):
    """RMSNorm of each head of x (tokens, heads, head_dim) over head_dim with `weight`
    (head_dim,), then rotate-half RoPE at integer `positions` (tokens,): the result of
    `rope(rms_norm(x, weight, eps), positions, theta)` in one launch."""
    fn = "norm_rope"
    torch_mode = A.is_torch(x)
    xt, wt, pt = A.tensor(x, "x", fn), A.tensor(weight, "weight", fn), A.tensor(positions, "positions", fn)
    dtype = A.dtype_in(xt, A.FLOATS, "x", fn)
    A.dtype_in(wt, A.FLOATS, "weight", fn)
    A.dtype_in(pt, A.INTS, "positions", fn)
    device = A.same_device(fn, x=xt, weight=wt, positions=pt)
    if xt.ndim != 3 or xt.shape[2] % 2 or pt.shape != (xt.shape[0],) or wt.shape != (xt.shape[2],):
        raise A.fail(fn, f"needs x (tokens, heads, head_dim) with an even head_dim, weight (head_dim,) and "
                         f"positions (tokens,); got x {xt.shape}, weight {wt.shape}, positions {pt.shape}",
                     help="weight holds one value per head_dim element, shared by every head")
    log2_base = log2_theta(fn, theta)                      # refused with empty x too
    o = A.output(out, xt.shape, dtype, device, torch_mode, fn)
    check_aliasing(fn, {"x": xt, "weight": wt, "positions": pt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    half = xt.shape[2] // 2
    cfg, tile = rope_tiles(dtype, xt.shape, config)
    y = o.tensor
    launch(norm_rope_kernel, {"y1": (y[:, :, :half], tile), "y2": (y[:, :, half:], tile)}, cfg=cfg,
           x1=xt[:, :, :half], x2=xt[:, :, half:], w1=wt[:half], w2=wt[half:], pos=pt, eps=float(eps),
           log2_theta=log2_base)
    return o.returned
