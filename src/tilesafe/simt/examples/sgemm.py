"""Tiled SGEMM in shared memory: c = a @ b, one output element per thread, T x T tiles per phase."""
import tilesafe as ts
from tilesafe import simt

T = 16


@simt.kernel(contract=simt.Contract(block=(T, T)))
def sgemm(c: simt.Disjoint[ts.f32, ("M", "N")], a: simt.Ref[ts.f32, ("M", "K")], b: simt.Ref[ts.f32, ("K", "N")],
          M: int, N: int, K: int):
    a_s = simt.shared((T, T), ts.f32)
    b_s = simt.shared((T, T), ts.f32)
    ty, tx = simt.thread_id(1), simt.thread_id(0)
    row = simt.block_id(1) * T + ty
    col = simt.block_id(0) * T + tx
    acc = 0.0
    for k0 in range(0, K, T):
        for p in a_s.permits(simt.per_thread()):     # each thread loads one element of each tile
            a_s[p] = a.get((row, k0 + p[1]), 0.0)
        for q in b_s.permits(simt.per_thread()):
            b_s[q] = b.get((k0 + q[0], col), 0.0)
        simt.barrier()                               # tiles complete
        for kk in range(T):
            acc += a_s[ty, kk] * b_s[kk, tx]
        simt.barrier()                               # everyone done reading before the next tiles
    for p in c.permits(simt.per_thread()):
        c[p] = acc
