"""Row softmax, one warp per row: warp-shuffle max and sum, then each lane writes its columns."""
import math

import tilesafe as ts
from tilesafe import simt

BLOCK = 128
WARPS = BLOCK // 32


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def softmax_rows(out: simt.Disjoint[ts.f32, ("R", "C")], x: simt.Ref[ts.f32, ("R", "C")], R: int, C: int):
    row = simt.block_id() * WARPS + simt.warp_id()   # the row this warp owns (uniform across its lanes)
    m = -math.inf
    for c in range(simt.lane(), C, 32):
        m = max(m, x.get((row, c), -math.inf))
    m = simt.warp_max(m)                             # the row's max, in every lane
    s = 0.0
    for c in range(simt.lane(), C, 32):
        s += math.exp(x.get((row, c), -math.inf) - m)
    s = simt.warp_sum(s)                             # the row's sum of exponentials
    for p in out.permits(simt.per_warp()):           # the warp's row; lanes stride its columns by 32
        out[p] = math.exp(x[p] - m) / s




ROW_BLOCK = 256
ROW_WARPS = ROW_BLOCK // 32


@simt.kernel(contract=simt.Contract(block=(ROW_BLOCK, 1), blocks_per_sm=8))     # 32 registers: 2048 threads an SM
def softmax_rows_staged(out: simt.Disjoint[ts.f32, ("R", "C")], x: simt.Ref[ts.f32, ("R", "C")], R: int, C: int,
                        K: simt.Const[int]):
    """A block per row, the row's first 256*K elements read once from global memory into shared
    memory (row[j, t] = x[b, 256j + t]): each thread's K elements are read in one go (all in
    flight), the max and the sum of exponentials come from shared memory (warp shuffles, then
    the block's warps through shared partials), and the row is written once. Columns past 256*K
    (K too small for C) are read from x instead, so any K gives the softmax; `softmax_staged`
    picks K = ceil(C / 256)."""
    row = simt.shared((K, ROW_BLOCK), ts.f32)
    part_max = simt.shared((ROW_WARPS,), ts.f32)
    part_sum = simt.shared((ROW_WARPS,), ts.f32)
    b = simt.block_id()
    t = simt.thread_id()
    for p in row.permits(simt.chunk(K)):                        # p = (j, t): -inf past the row's end
        row[p] = x.get((b, p[0] * ROW_BLOCK + p[1]), -math.inf)
    simt.barrier()
    m = -math.inf
    for j in range(K):                                          # this thread's own elements
        m = max(m, row[j, t])
    for c in range(K * ROW_BLOCK + t, C, ROW_BLOCK):            # columns past the staged ones (none if K fits)
        m = max(m, x.get((b, c), -math.inf))
    m = simt.warp_max(m)
    for p in part_max.permits(simt.per_warp(1)):
        part_max[p] = m
    simt.barrier()
    m = simt.warp_max(part_max.get(simt.lane(), -math.inf))     # the row's max, in every thread
    s = 0.0
    for j in range(K):
        s += math.exp(row[j, t] - m)
    for c in range(K * ROW_BLOCK + t, C, ROW_BLOCK):
        s += math.exp(x.get((b, c), -math.inf) - m)
    s = simt.warp_sum(s)
    for p in part_sum.permits(simt.per_warp(1)):
        part_sum[p] = s
    simt.barrier()
    inv = 1.0 / simt.warp_sum(part_sum.get(simt.lane(), 0.0))
    for p in out.permits(simt.per_block()):                     # block b holds row b, threads stride by 256
        out[p] = math.exp(row.get((p[1] // ROW_BLOCK, p[1] % ROW_BLOCK), 0.0) - m) * inv \
            if p[1] < K * ROW_BLOCK else math.exp(x[p] - m) * inv


STAGED_MAX_K = 47      # 47 x 256 f32 and the partials: within the 48 KiB of static shared memory a block may have


def softmax_staged(out, x):
    """out = softmax(x, dim=1) by softmax_rows_staged with K = ceil(C / 256) (at most STAGED_MAX_K:
    longer rows read the rest from global memory)."""
    k = max(1, min(STAGED_MAX_K, -(-x.shape[1] // ROW_BLOCK)))
    return softmax_rows_staged(out, x, K=k)
