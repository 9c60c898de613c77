"""Block reduction: out[b] = sum of x's slab b of K elements, through warp sums and shared memory."""
import tilesafe as ts
from tilesafe import simt

BLOCK = 256
WARPS = BLOCK // 32


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def block_sum(out: simt.Disjoint[ts.f32, ("B",)], x: simt.Ref[ts.f32, ("N",)], B: int, N: int,
              K: simt.Const[int]):
    partial = simt.shared((WARPS,), ts.f32)          # one partial sum per warp
    acc = 0.0
    base = simt.block_id() * K
    for j in range(simt.thread_id(), K, BLOCK):      # each thread strides through the block's slab
        acc += x.get(base + j, 0.0)                  # the ragged last slab reads 0 past N
    acc = simt.warp_sum(acc)                         # every lane holds its warp's sum
    for p in partial.permits(simt.per_warp(1)):      # lane 0 of each warp holds partial[warp]
        partial[p] = acc
    simt.barrier()                                   # partials written; now every thread may read them
    total = simt.warp_sum(partial.get(simt.lane(), 0.0))
    for p in out.permits(simt.per_block(1)):         # thread 0 of block b holds out[b]
        out[p] = total
