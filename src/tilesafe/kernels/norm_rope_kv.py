"""`norm_rope_kv_write`: a decode step's q/k per-head RMSNorm + RoPE and the K/V cache write
in one kernel (Qwen3's attention prologue).

Separately this is `norm_rope(q)`, `norm_rope(k)` and `paged_kv_write(k, v)`: three launches
per layer, and k goes through memory once more. Here one persistent kernel walks five
outputs, each with its own walk (S1): q's two halves (`tiles()`), and the key cache's two
halves and the value cache (`scatter(slots)`, S17: each row lands at its slot, rows whose
slot is out of range or repeated write nothing). Every output is a `ts.MutTiles` — the
language does not mix `ts.Mut` and `ts.MutTiles` outputs in a kernel — so q is walked too.
A head's rotation needs both of its halves, so each half's walk loads both and normalises
them (the sum of squares spans the row); the arithmetic is `norm_rope`'s, so the keys and
queries equal `norm_rope`'s up to the order of the sum.

A block's walks run one after another, each a dependent load, its math and a store, so at
decode sizes the kernel's time is the sum of its walks' times (Qwen3-4B at batch 1: 5.9 us
for 40 heads of 128). When half a head is a power of two (head_dim 64, 128, ...)
`norm_rope_kv_rows_kernel` walks whole heads instead, seen as (2, half) tiles, so q and k
take one walk each: three walks, half the time at 8 and 32 tokens on the H200, and with
2-head tiles at one token 4.8 us against 6.9. `config=` sets the tiles (`block_t`,
`block_h`) and `num_warps`, as `norm_rope`'s.
"""
import tilesafe as ts

from . import arguments as A
from . import configs, layout
from .call_checks import check_aliasing
from .launch import cdiv, launch, pow2, workers
from .rope import log2_theta

# Whole heads per tile (three walks) from this many tokens on (the probe sets it to time the
# five-walk form). Measured on the H200 (Qwen3 heads of 128, benchmarks/probes/
# decode_attention_sizes.py, rounds 1-2): three walks of 8-head tiles 8.5 / 10.0 us at 8 / 32
# tokens against 16.5 / 18.0 for five; at one token 8.4 against 6.9, but with 2-head tiles
# (ONE_TOKEN_HEADS) 4.8 us: a walk's math, not only its latency, counts at these sizes.
WHOLE_HEADS_FROM = 1
# Heads per tile of a one-token step (unless config= sets block_h). One head: Qwen3-4B's batch-1
# step 2.840 ms against 2.858 with two and 2.891 with four; 0.6B 0.846 against 0.860 and 0.888
# (H200, session 18 round 1, decode_step_variants.py nrk_h1/nrk_h4).
ONE_TOKEN_HEADS = 1
# Tiles of a step of 2..FEW_TOKENS tokens (a small decode batch; unless config= sets them): one
# token by FEW_TOKEN_HEADS heads. At 8 tokens (Qwen3-4B, the 36 layers in one graph, H200,
# session 18 batch_parts_probe.py) 4.28 us a layer against 5.94 with the "rope" family's 4 x 8
# tiles (1 x 4 5.28, 2 x 2 5.27, 2 x 4 8.45, 1 x 8 8.44); at 32 and 128 tokens 4 x 8 stayed the
# fastest (6.98 and 8.27 us; 1 x 2 7.52 and 24.4), so larger steps keep it.
FEW_TOKENS = 8
FEW_TOKEN_HEADS = 2
# True: the three walks of `norm_rope_kv_rows_kernel` on blocks of their own (`first=`: k's and
# v's walks start past q's tiles, the grid holds all three), so that a decode step's blocks each
# run one walk, side by side, instead of block 0 running a q, a k and a v walk in a row. On: H200,
# session 19 (decode_step_variants.py: nrk_stagger), a 4B step 2.603 -> 2.558 ms, 0.6B 0.813 ->
# 0.777 ms, the same greedy tokens.
STAGGER_WALKS = True


@ts.function
def norm_rotate(x1, x2, w1, w2, pos, at, eps, log2_theta, T, BT, BH, HP, HALF, FIRST):
    """Tile `at` (tokens, heads, half) of x's heads normalised with (w1, w2), rounded to T,
    rotated at their positions: the first half when FIRST, else the second; (BT, BH, HP) in T."""
    a = ts.load(x1, at, shape=(BT, BH, HP)).astype(ts.f32)                # (BT, BH, HP), zeros past HALF
    b = ts.load(x2, at, shape=(BT, BH, HP)).astype(ts.f32)
    wa = ts.reshape(ts.load(w1, (0,), shape=(HP,)).astype(ts.f32), (1, 1, HP))
    wb = ts.reshape(ts.load(w2, (0,), shape=(HP,)).astype(ts.f32), (1, 1, HP))
    r = ts.rsqrt((ts.sum(a * a, axis=2, keepdims=True) + ts.sum(b * b, axis=2, keepdims=True)) / (2 * HALF) + eps)
    a = (a * r * wa).astype(T).astype(ts.f32)                              # rounded as rms_norm's output
    b = (b * r * wb).astype(T).astype(ts.f32)
    p = ts.load(pos, (at[0],), shape=(BT,)).astype(ts.f32)                 # (BT,) positions
    inv_freq = ts.exp2(-(ts.arange(0, HP).astype(ts.f32) * 2.0 / (2 * HALF)) * log2_theta)   # (HP,)
    angle = ts.reshape(p, (BT, 1, 1)) * ts.reshape(inv_freq, (1, 1, HP))  # (BT, 1, HP)
    if FIRST:
        r = a * ts.cos(angle) - b * ts.sin(angle)
    else:
        r = b * ts.cos(angle) + a * ts.sin(angle)
    return r.astype(T)


@ts.kernel
def norm_rope_kv_kernel(q1: ts.MutTiles["T", ("BT", "BH", "HP")], q2: ts.MutTiles["T", ("BT", "BH", "HP")],
                        kc1: ts.MutTiles["T", ("BT", "BK", "HP")], kc2: ts.MutTiles["T", ("BT", "BK", "HP")],
                        vc: ts.MutTiles["T", ("BT", "C")],
                        xq1: ts.Ref["T", ("NT", "NH", "HALF")], xq2: ts.Ref["T", ("NT", "NH", "HALF")],
                        xk1: ts.Ref["T", ("NT", "NK", "HALF")], xk2: ts.Ref["T", ("NT", "NK", "HALF")],
                        xv: ts.Ref["T", ("NT", "W")], wq1: ts.Ref["TW", ("HALF",)], wq2: ts.Ref["TW", ("HALF",)],
                        wk1: ts.Ref["TW", ("HALF",)], wk2: ts.Ref["TW", ("HALF",)], pos: ts.Ref["TP", ("NT",)],
                        slots: ts.Ref["TS", ("NT",)], eps: float, log2_theta: float, T: ts.Const[ts.DType],
                        TW: ts.Const[ts.DType], TP: ts.Const[ts.DType], TS: ts.Const[ts.DType], BT: ts.Const[int],
                        BH: ts.Const[int], BK: ts.Const[int], HP: ts.Const[int], C: ts.Const[int], NT: int,
                        NH: int, NK: int, HALF: int, W: int):
    for i in q1.tiles():                                   # (token tile, head tile, 0) of q
        q1.store(norm_rotate(xq1, xq2, wq1, wq2, pos, i, eps, log2_theta, T, BT, BH, HP, HALF, True), i)
    for i in q2.tiles():
        q2.store(norm_rotate(xq1, xq2, wq1, wq2, pos, i, eps, log2_theta, T, BT, BH, HP, HALF, False), i)
    for j in kc1.scatter(slots):                           # (token tile, head tile, 0) of k, rows to their slots
        kc1.store(norm_rotate(xk1, xk2, wk1, wk2, pos, j, eps, log2_theta, T, BT, BK, HP, HALF, True), j)
    for j in kc2.scatter(slots):
        kc2.store(norm_rotate(xk1, xk2, wk1, wk2, pos, j, eps, log2_theta, T, BT, BK, HP, HALF, False), j)
    for j in vc.scatter(slots):                            # (token tile, column tile) of v
        vc.store(ts.load(xv, j, shape=(BT, C)), j)


@ts.function
def norm_rotate_rows(x, w, pos, at, eps, log2_theta, T, BT, BH, HP):
    """Tile `at` (tokens, heads) of x's heads, seen as (tokens, heads, 2, HALF): normalised
    with w (2, HALF), rounded to T, rotated at their positions; (BT, BH, 2 * HP) in T."""
    xt = ts.load(x, (at[0], at[1], 0, 0), shape=(BT, BH, 2, HP)).astype(ts.f32)   # (BT, BH, 2, HP) both halves
    wt = ts.reshape(ts.load(w, (0, 0), shape=(2, HP)).astype(ts.f32), (1, 1, 2, HP))
    ss = ts.sum(ts.sum(xt * xt, axis=3, keepdims=True), axis=2, keepdims=True)    # (BT, BH, 1, 1)
    xt = (xt * ts.rsqrt(ss / (2 * HP) + eps) * wt).astype(T).astype(ts.f32)      # rounded as rms_norm's output
    half = ts.reshape(ts.arange(0, 2), (1, 1, 2, 1))                               # which half
    a = ts.sum(ts.where(half == 0, xt, 0.0), axis=2, keepdims=True)                # (BT, BH, 1, HP): picks, adds 0s
    b = ts.sum(ts.where(half == 1, xt, 0.0), axis=2, keepdims=True)
    p = ts.load(pos, (at[0],), shape=(BT,)).astype(ts.f32)                         # (BT,) positions
    inv_freq = ts.exp2(-(ts.arange(0, HP).astype(ts.f32) * 2.0 / (2 * HP)) * log2_theta)   # (HP,)
    angle = ts.reshape(p, (BT, 1, 1, 1)) * ts.reshape(inv_freq, (1, 1, 1, HP))    # (BT, 1, 1, HP)
    c, s = ts.cos(angle), ts.sin(angle)
    r = ts.where(half == 0, a * c - b * s, b * c + a * s)                          # (BT, BH, 2, HP)
    return ts.reshape(r.astype(T), (BT, BH, 2 * HP))                               # the halves side by side


@ts.kernel
def norm_rope_kv_rows_kernel(qo: ts.MutTiles["T", ("BT", "BH", "DP")], kc: ts.MutTiles["T", ("BT", "BK", "DP")],
                             vc: ts.MutTiles["T", ("BT", "C")], xq: ts.Ref["T", ("NT", "NH", 2, "HALF")],
                             xk: ts.Ref["T", ("NT", "NK", 2, "HALF")], xv: ts.Ref["T", ("NT", "W")],
                             wq: ts.Ref["TW", (2, "HALF")], wk: ts.Ref["TW", (2, "HALF")],
                             pos: ts.Ref["TP", ("NT",)], slots: ts.Ref["TS", ("NT",)], eps: float,
                             log2_theta: float, T: ts.Const[ts.DType], TW: ts.Const[ts.DType],
                             TP: ts.Const[ts.DType], TS: ts.Const[ts.DType], BT: ts.Const[int], BH: ts.Const[int],
                             BK: ts.Const[int], HP: ts.Const[int], DP: ts.Const[int], C: ts.Const[int],
                             KF: ts.Const[int], VF: ts.Const[int], NT: int, NH: int, NK: int, HALF: int, W: int):
    """`norm_rope_kv_kernel` for a power-of-two half (HP == HALF): each tile holds whole heads,
    so three walks instead of five — each walk is a load, its math and a store in a row, and a
    block's walks run one after another. The k and v walks start at blocks KF and VF (`first=`):
    past q's tiles, so that with a block per tile no block walks twice."""
    for i in qo.tiles():                                   # (token tile, head tile, 0) of q
        qo.store(norm_rotate_rows(xq, wq, pos, i, eps, log2_theta, T, BT, BH, HP), i)
    for j in kc.scatter(slots, first=KF):                  # (token tile, head tile, 0) of k, rows to their slots
        kc.store(norm_rotate_rows(xk, wk, pos, j, eps, log2_theta, T, BT, BK, HP), j)
    for j in vc.scatter(slots, first=VF):                  # (token tile, column tile) of v
        vc.store(ts.load(xv, j, shape=(BT, C)), j)


def step_tiles(t: int, cfg: dict, given: dict) -> tuple[int, int]:
    """(tokens, heads) of a tile for a step of t tokens: what `given` (the call's config=) sets,
    else one token by ONE_TOKEN_HEADS heads at one token, by FEW_TOKEN_HEADS up to FEW_TOKENS
    tokens, and the "rope" config `cfg`'s tiles above."""
    if t == 1:
        bt, heads = 1, ONE_TOKEN_HEADS
    elif t <= FEW_TOKENS:
        bt, heads = 1, FEW_TOKEN_HEADS
    else:
        bt, heads = cfg["block_t"], cfg["block_h"]
    return min(given.get("block_t", bt), pow2(t)), given.get("block_h", heads)


def norm_rope_kv_write(q, k, v, q_weight, k_weight, positions, slots, k_cache, v_cache, eps=1e-6, theta=1e6,
                       q_out=None, config=None):
    """q_out = norm_rope(q, q_weight, positions); the caches' rows `slots` get norm_rope(k,
    k_weight, positions) and v — one launch.

    q (T, H, D), k and v (T, HKV, D) (views of a packed qkv row are fine); the caches are
    paged, (num_blocks, block_size, HKV, D) as `paged_kv_write`'s, and `slots` (T,) names
    each token's cache row: an entry out of range or repeated writes nothing (S17), a negative
    one is a padded token. Nothing is read on the host, so it can be captured in `ts.graph()`.
    `config` sets the tiles (`block_t` tokens, `block_h` heads) and `num_warps`. Returns
    q_out (allocated when not given)."""
    fn = "norm_rope_kv_write"
    torch_mode = A.is_torch(q)
    (qt, kt, vt, kc, vc), dtype, device = A.float_operands(fn, q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache)
    wq, wk, pt = (A.tensor(x, name, fn) for x, name in ((q_weight, "q_weight"), (k_weight, "k_weight"),
                                                        (positions, "positions")))
    A.dtype_in(wq, A.FLOATS, "q_weight", fn)
    A.dtype_in(wk, A.FLOATS, "k_weight", fn)
    A.dtype_in(pt, A.INTS, "positions", fn)
    if qt.ndim != 3 or kt.ndim != 3 or vt.shape != kt.shape or kt.shape[0] != qt.shape[0] \
            or kt.shape[2] != qt.shape[2] or qt.shape[2] % 2 or kc.ndim != 4 or vc.shape != kc.shape \
            or kc.shape[2:] != kt.shape[1:]:
        raise A.fail(fn, f"needs q (T, H, D), k and v (T, HKV, D) with an even D and caches (num_blocks, block_size, "
                         f"HKV, D); got q {qt.shape}, k {kt.shape}, v {vt.shape}, k_cache {kc.shape}, "
                         f"v_cache {vc.shape}", help="pass one decode step's heads and the paged caches")
    t, h, d = qt.shape
    hkv = kt.shape[1]
    if wq.shape != (d,) or wk.shape != (d,) or pt.shape != (t,):
        raise A.fail(fn, f"needs q_weight and k_weight ({d},) and positions ({t},); got {wq.shape}, {wk.shape} and "
                         f"{pt.shape}", help="one norm weight per head_dim element, one position per token")
    st = A.int_vector(fn, slots, "slots", t, device)
    A.same_device(fn, q=qt, q_weight=wq, k_weight=wk, positions=pt)
    log2_base = log2_theta(fn, theta)
    o = A.output(q_out, qt.shape, dtype, device, torch_mode, fn)
    nb, bs = kc.shape[:2]
    kr, vr = kc.reshape(nb * bs, hkv, d), vc.reshape(nb * bs, hkv * d)      # rows of the caches
    check_aliasing(fn, {"q": qt, "k": kt, "v": vt, "q_weight": wq, "k_weight": wk, "positions": pt, "slots": st},
                   {"q_out": o.passed, "k_cache": kc, "v_cache": vc})
    if t == 0:
        return o.returned
    half = d // 2
    cfg = configs.lookup("rope", configs.shape_class(dtype, d), config, dtype)
    bt, heads = step_tiles(t, cfg, config or {})
    hp = pow2(half)
    bh, bk = min(heads, pow2(h)), min(heads, pow2(hkv))
    c = min(pow2(hkv * d), 1024)
    y = o.tensor
    if hp == half and t >= WHOLE_HEADS_FROM:               # whole heads per tile: three walks
        walks = [cdiv(t, bt) * n for n in (cdiv(h, bh), cdiv(hkv, bk), cdiv(hkv * d, c))]   # q, k, v tiles
        kf, vf = (walks[0], walks[0] + walks[1]) if STAGGER_WALKS else (0, 0)
        tiles = sum(walks) if STAGGER_WALKS else max(walks)
        launch(norm_rope_kv_rows_kernel, {"qo": (y, (bt, bh, d)), "kc": (kr, (bt, bk, d)), "vc": (vr, (bt, c))},
               (max(1, min(tiles, workers(device))),), cfg=cfg, KF=kf, VF=vf, xq=layout.split_axis(qt, 2, 2),
               xk=layout.split_axis(kt, 2, 2), xv=vt.reshape(t, hkv * d), wq=wq.reshape(2, half),
               wk=wk.reshape(2, half), pos=pt, slots=st, HP=hp, eps=float(eps), log2_theta=log2_base)
        return o.returned
    tiles = cdiv(t, bt) * cdiv(h, bh) * 2
    launch(norm_rope_kv_kernel, {"q1": (y[:, :, :half], (bt, bh, hp)), "q2": (y[:, :, half:], (bt, bh, hp)),
                                 "kc1": (kr[:, :, :half], (bt, bk, hp)), "kc2": (kr[:, :, half:], (bt, bk, hp)),
                                 "vc": (vr, (bt, c))}, (max(1, min(tiles, workers(device))),), cfg=cfg,
           xq1=qt[:, :, :half], xq2=qt[:, :, half:], xk1=kt[:, :, :half], xk2=kt[:, :, half:],
           xv=vt.reshape(t, hkv * d), wq1=wq[:half], wq2=wq[half:], wk1=wk[:half], wk2=wk[half:], pos=pt, slots=st,
           eps=float(eps), log2_theta=log2_base)
    return o.returned
