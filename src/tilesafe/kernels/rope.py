"""The small kernels of an LLM step: `rope`, `embedding`, `argmax` (and `silu_mul`, which
lives with the elementwise kernels).

`rope` rotates the two halves of each head (rotate-half, as Llama/Qwen): it reads and
writes the halves as separate views of the same tensors, so head dims whose half is not a
power of two pad the tile instead of failing. The angles are computed in the kernel in
fp32 from the positions and theta, so no cos/sin table is needed. `embedding` gathers
table rows with `ts.gather`. `argmax` is two-stage: per (row, chunk of the vocabulary)
the best value and its index, then one pass per row over the chunks.
"""
import math
from dataclasses import dataclass

import tilesafe as ts

from . import arguments as A
from . import configs, layout
from .call_checks import check_aliasing, workspace_outputs
from .call_plans import planned
from .elementwise import silu_mul
from .launch import cdiv, launch, pow2

NEG_INF = -float("inf")


@ts.kernel
def rope_kernel(y1: ts.Mut["T", ("BT", "BH", "HP")], y2: ts.Mut["T", ("BT", "BH", "HP")],
                x1: ts.Ref["T", ("NT", "NH", "HALF")], x2: ts.Ref["T", ("NT", "NH", "HALF")],
                pos: ts.Ref["TP", ("NT",)], T: ts.Const[ts.DType], TP: ts.Const[ts.DType], BT: ts.Const[int],
                BH: ts.Const[int], HP: ts.Const[int], NT: int, NH: int, HALF: int, log2_theta: float):
    p = ts.load(pos, (ts.block_id(0),), shape=(BT,)).astype(ts.f32)         # (BT,) positions
    e = ts.arange(0, HP).astype(ts.f32) * 2.0 / (2 * HALF)                   # (HP,) 2i / head_dim
    inv_freq = ts.exp2(-e * log2_theta)                                      # (HP,) theta^(-2i/D)
    angle = ts.reshape(p, (BT, 1, 1)) * ts.reshape(inv_freq, (1, 1, HP))    # (BT, 1, HP)
    c, s = ts.cos(angle), ts.sin(angle)
    a = ts.load_tile_like(x1, y1).astype(ts.f32)                            # (BT, BH, HP) first half
    b = ts.load_tile_like(x2, y1).astype(ts.f32)                            # (BT, BH, HP) second half
    y1.store((a * c - b * s).astype(T))
    y2.store((b * c + a * s).astype(T))


@ts.kernel
def embedding_kernel(y: ts.Mut["T", ("BT", "BD")], ids: ts.Ref["TI", ("NT",)], table: ts.Ref["T", ("V", "D")],
                     T: ts.Const[ts.DType], TI: ts.Const[ts.DType], BT: ts.Const[int], BD: ts.Const[int],
                     NT: int, V: int, D: int):
    rows = ts.load(ids, (ts.block_id(0),), shape=(BT,))                     # (BT,) token ids
    y.store(ts.gather(table, rows, axis=0, shape=(BT, BD), index=(0, ts.block_id(1))))


@ts.kernel
def argmax_partial_kernel(best_o: ts.Mut[ts.f32, ("BM", 1)], at_o: ts.Mut[ts.i32, ("BM", 1)],
                          x: ts.Ref["T", ("M", "N")], T: ts.Const[ts.DType], BM: ts.Const[int],
                          BN: ts.Const[int], PER: ts.Const[int], M: int, N: int):
    """Block (i, s): rows i*BM.., column tiles s*PER .. (s+1)*PER of x."""
    i, s = ts.block_id(0), ts.block_id(1)
    px = x.partition((BM, BN))                                               # (BM, BN)
    best = ts.full((BM, 1), NEG_INF, ts.f32)                                 # (BM, 1)
    at = ts.zeros((BM, 1), ts.i32)                                           # (BM, 1)
    for t in range(s * PER, min((s + 1) * PER, ts.num_tiles(px, 1))):
        v = px.load((i, t), padding=NEG_INF).astype(ts.f32)                  # (BM, BN)
        vmax = ts.max(v, axis=1, keepdims=True)
        better = vmax > best                                                 # strict: ties keep the first
        best = ts.where(better, vmax, best)
        at = ts.where(better, ts.argmax(v, axis=1, keepdims=True) + t * BN, at)
    best_o.store(best)
    at_o.store(at)


@ts.kernel
def argmax_final_kernel(z: ts.Mut[ts.i32, ("BM",)], best: ts.Ref[ts.f32, ("M", "S")], at: ts.Ref[ts.i32, ("M", "S")],
                        BM: ts.Const[int], SP: ts.Const[int], M: int, S: int):
    i = ts.block_id(0)
    v = ts.load(best, (i, 0), shape=(BM, SP), padding=NEG_INF)               # (BM, SP)
    ix = ts.load(at, (i, 0), shape=(BM, SP))                                 # (BM, SP)
    first = ts.argmax(v, axis=1, keepdims=True)                              # (BM, 1) first best chunk
    pick = ts.reshape(ts.arange(0, SP), (1, SP)) == first                    # (BM, SP)
    z.store(ts.sum(ts.where(pick, ix, 0), axis=1))


# --- public API -------------------------------------------------------------------------


@planned
def rope(x, positions, theta=1e6, out=None, config=None):
    """Rotate-half rotary embedding of x (tokens, heads, head_dim) at integer `positions`
    (tokens,): out[..., :D/2] = x1 cos - x2 sin, out[..., D/2:] = x2 cos + x1 sin with angle
    pos * theta^(-2i/D), computed in fp32."""
    fn = "rope"
    torch_mode = A.is_torch(x)
    xt, pt = A.tensor(x, "x", fn), A.tensor(positions, "positions", fn)
    dtype = A.dtype_in(xt, A.FLOATS, "x", fn)
    A.dtype_in(pt, A.INTS, "positions", fn)
    device = A.same_device(fn, x=xt, positions=pt)
    if xt.ndim != 3 or xt.shape[2] % 2 or pt.shape != (xt.shape[0],):
        raise A.fail(fn, f"needs x (tokens, heads, head_dim) with an even head_dim and positions (tokens,); "
                         f"got x {xt.shape} and positions {pt.shape}")
    log2_base = log2_theta(fn, theta)                      # refused with empty x too
    o = A.output(out, xt.shape, dtype, device, torch_mode, fn)
    check_aliasing(fn, {"x": xt, "positions": pt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    half = xt.shape[2] // 2
    cfg, tile = rope_tiles(dtype, xt.shape, config)
    y = o.tensor
    launch(rope_kernel, {"y1": (y[:, :, :half], tile), "y2": (y[:, :, half:], tile)}, cfg=cfg,
           x1=xt[:, :, :half], x2=xt[:, :, half:], pos=pt, log2_theta=log2_base)
    return o.returned


def rope_tiles(dtype, shape, config) -> tuple[dict, tuple[int, int, int]]:
    """The rope config for x of `shape` (T, H, D) and its tile of each half (tokens, heads, D/2);
    norm_rope launches by the same."""
    t, h, d = shape
    cfg = configs.lookup("rope", configs.shape_class(dtype, d), config, dtype)
    return cfg, (min(cfg["block_t"], pow2(t)), min(cfg["block_h"], pow2(h)), pow2(d // 2))


def log2_theta(fn: str, theta) -> float:
    """log2 of RoPE's base `theta`, refused unless it is > 1."""
    if not theta > 1:
        raise A.fail(fn, f"theta must be > 1, got {theta!r}", help="Qwen3 uses rope_theta 1e6")
    return math.log2(theta)


@planned
def embedding(ids, table, out=None, config=None):
    """Rows of `table` (V, D) at integer `ids` (any shape): result ids.shape + (D,).
    Ids outside [0, V) read zeros (no error: checking them would need a device sync)."""
    fn = "embedding"
    torch_mode = A.is_torch(table)
    it, tt = A.tensor(ids, "ids", fn), A.tensor(table, "table", fn)
    A.dtype_in(it, A.INTS, "ids", fn)
    dtype = A.dtype_in(tt, A.FLOATS, "table", fn)
    device = A.same_device(fn, ids=it, table=tt)
    if tt.ndim != 2:
        raise A.fail(fn, f"`table` must be (V, D), got {tt.shape}")
    d = tt.shape[1]
    o = A.output(out, it.shape + (d,), dtype, device, torch_mode, fn)
    check_aliasing(fn, {"ids": it, "table": tt}, {"out": o.passed})
    if o.tensor.numel == 0:
        return o.returned
    views = layout.matrices([layout.strided(it, it.shape + (1,), it.strides + (1,)), o.tensor])
    if views is None:
        raise A.fail(fn, f"the axes of ids {it.shape} do not merge into one", help="pass contiguous ids")
    iv, ov = views
    n = iv.shape[0]
    cfg = configs.lookup("embedding", configs.shape_class(dtype, d), config, dtype)
    tile = (min(cfg["block_t"], pow2(n)), min(cfg["block_d"], pow2(d)))
    launch(embedding_kernel, {"y": (ov, tile)}, cfg=cfg, ids=layout.strided(iv, (n,), (iv.strides[0],)), table=tt)
    return o.returned


@dataclass(frozen=True)
class ArgmaxWorkspace:
    """Scratch for `argmax`: per (row, chunk) best value and index."""
    best: ts.Tensor     # (M, chunks) f32
    at: ts.Tensor       # (M, chunks) i32


def argmax_workspace(x, config=None, *, dim=-1) -> ArgmaxWorkspace:
    """Allocate the scratch of `argmax(x, dim=dim)` (once, before a graph capture)."""
    xt = A.tensor(x, "x", "argmax_workspace", differentiable=False)
    xt, _ = A.axis_last("argmax_workspace", xt, None, dim)
    m, n = _rows(xt), xt.shape[-1]
    cfg = configs.lookup("argmax", configs.shape_class(xt.dtype, n), config, xt.dtype)
    chunks = max(1, cdiv(n, _chunk(cfg, n)))
    return ArgmaxWorkspace(A.empty_scratch((m, chunks), ts.f32, xt.device),
                           A.empty_scratch((m, chunks), ts.i32, xt.device))


@planned
def argmax(x, out=None, workspace=None, config=None, *, dim=-1):
    """Index (i32) of the maximum over `dim` (the last by default; the first index on ties),
    e.g. greedy sampling over a vocabulary. Result shape: x's without `dim`."""
    fn = "argmax"
    torch_mode = A.is_torch(x)
    xt = A.tensor(x, "x", fn, differentiable=False)   # torch's argmax has no gradient either
    dtype = A.dtype_in(xt, A.FLOATS, "x", fn)
    if xt.ndim == 0:
        raise A.fail(fn, "needs a tensor with at least one axis")
    xt, _ = A.axis_last(fn, xt, None, dim)            # a view with `dim` last
    if xt.shape[-1] == 0:
        raise A.fail(fn, f"needs a non-empty last axis, got shape {xt.shape}",
                     help="an empty row has no largest element (torch.argmax refuses it too)")
    o = A.output(out, xt.shape[:-1], ts.i32, xt.device, torch_mode, fn)
    if o.tensor.numel == 0:
        return o.returned
    views = layout.matrices([xt, layout.strided(o.tensor, o.tensor.shape + (1,), o.tensor.strides + (1,))])
    if views is None:
        raise A.fail(fn, f"the leading axes of x {xt.shape} do not merge into one", help="pass a contiguous x")
    xv, zv = views
    m, n = xv.shape
    cfg = configs.lookup("argmax", configs.shape_class(dtype, n), config, dtype)
    ws = workspace if workspace is not None else argmax_workspace(xt, config)
    chunk = _chunk(cfg, n)
    if ws.best.shape != (m, max(1, cdiv(n, chunk))):
        raise A.fail(fn, "the workspace was made for another shape or config", help="use argmax_workspace(x)")
    # The whole call, before its first launch (the partial results, then the final pass).
    check_aliasing(fn, {"x": xt}, {"out": o.passed, **workspace_outputs(workspace, ("best", "at"))})
    bm, bn = min(cfg["block_m"], pow2(m)), min(cfg["block_n"], pow2(n))
    launch(argmax_partial_kernel, {"best_o": (ws.best, (bm, 1)), "at_o": (ws.at, (bm, 1))}, cfg=cfg, x=xv, BN=bn,
           PER=chunk // bn)
    launch(argmax_final_kernel, {"z": (layout.strided(zv, (m,), (zv.strides[0],)), (bm,))}, cfg=None, best=ws.best,
           at=ws.at, SP=pow2(ws.best.shape[1]))
    return o.returned


def _rows(xt) -> int:
    m = 1
    for s in xt.shape[:-1]:
        m *= s
    return m


def _chunk(cfg, n) -> int:
    """Columns per chunk: a multiple of the column tile."""
    bn = min(cfg["block_n"], pow2(n))
    return max(bn, cfg["chunk"] // bn * bn)


_ = silu_mul
