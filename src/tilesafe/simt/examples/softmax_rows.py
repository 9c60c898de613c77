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
