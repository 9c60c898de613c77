"""Kernels shared by the GPU runtime tests (plain tilesafe kernels, no test logic)."""
import tilesafe as ts


@ts.kernel
def spin(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, n: int):
    """A deliberately slow kernel: n dependent FMAs per element, then z = x + 1."""
    t = ts.load_tile_like(x, z)
    acc = t * 0.0
    for i in range(n):
        acc = acc * 0.5 + 1.0e-30
    z.store(t + 1.0 + acc * 0.0)


@ts.kernel
def scale(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, a: float):
    z.store(ts.load_tile_like(x, z) * a)


@ts.kernel
def rms_norm(y: ts.Mut["T", (1, "D")], x: ts.Ref["T", (1, "D")], w: ts.Ref["T", ("D",)],
             T: ts.Const[ts.DType], D: ts.Const[int], eps: float):
    t = ts.load_tile_like(x, y).astype(ts.f32)                       # (1, D)
    r = ts.rsqrt(ts.sum(t * t, axis=1, keepdims=True) / D + eps)     # (1, 1)
    wt = ts.load(w, (0,), shape=(D,)).astype(ts.f32)                 # (D,)
    y.store((t * r * ts.reshape(wt, (1, D))).astype(T))


@ts.kernel
def matvec(y: ts.Mut["T", (1, "BN")], x: ts.Ref["T", (1, "K")], w: ts.Ref["T", ("N", "K")],
           T: ts.Const[ts.DType], BN: ts.Const[int], BK: ts.Const[int], K: int, N: int):
    """y[0, n] = sum_k x[0, k] * w[n, k] for this block's BN outputs."""
    j = ts.block_id(1)
    px = x.partition((1, BK))
    pw = w.partition((BN, BK))
    acc = ts.zeros((BN, BK), ts.f32)
    for k in range(ts.num_tiles(px, 1)):
        acc = acc + px.load((0, k)).astype(ts.f32) * pw.load((j, k)).astype(ts.f32)   # (BN, BK)
    y.store(ts.reshape(ts.sum(acc, axis=1), (1, BN)).astype(T))


@ts.kernel
def add(z: ts.Mut["T", (1, "B")], x: ts.Ref["T", (1, "N")], y: ts.Ref["T", (1, "N")],
        T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + ts.load_tile_like(y, z))
