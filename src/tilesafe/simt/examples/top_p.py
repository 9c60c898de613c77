"""Top-p (nucleus) sampling over vocabulary rows, one block per row.

1. Threshold: bisect for the largest `lo` whose tokens (probs >= lo) still hold at least `top_p`
   of the mass; each step is a block reduction (warp sums, then per-warp partials in shared
   memory between barriers). The kept set is the smallest set of top tokens reaching `top_p`.
2. Sample: among kept tokens, the argmax of prob / expo (an exponential race: with `expo`
   i.i.d. Exp(1), token i wins with probability proportional to prob i), reduced the same way.
`expo` is drawn on the host (e.g. `torch.empty_like(probs).exponential_()`), so a launch is a
pure function of its inputs.
"""
import tilesafe as ts
from tilesafe import simt

BLOCK = 256
WARPS = BLOCK // 32


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def top_p_sample(token: simt.Disjoint[ts.i32, ("R",)], probs: simt.Ref[ts.f32, ("R", "V")],
                 expo: simt.Ref[ts.f32, ("R", "V")], top_p: float, R: int, V: int, STEPS: simt.Const[int] = 30):
    mass_part = simt.shared((WARPS,), ts.f32)
    key_part = simt.shared((WARPS,), ts.f32)
    index_part = simt.shared((WARPS,), ts.i32)
    row = simt.block_id()
    t = simt.thread_id()
    lo = 0.0
    hi = 1.0
    for step in range(STEPS):                        # 1. the top-p threshold, by bisection
        mid = (lo + hi) * 0.5
        acc = 0.0
        for c in range(t, V, BLOCK):
            v = probs.get((row, c), 0.0)
            if v >= mid:
                acc += v
        acc = simt.warp_sum(acc)
        for p in mass_part.permits(simt.per_warp(1)):
            mass_part[p] = acc
        simt.barrier()
        mass = simt.warp_sum(mass_part.get(simt.lane(), 0.0))
        simt.barrier()                               # all read before the next step writes
        if mass >= top_p:
            lo = mid
        else:
            hi = mid
    best = -1.0                                      # 2. the exponential race among kept tokens
    best_index = V
    for c in range(t, V, BLOCK):
        v = probs.get((row, c), 0.0)
        key = v / expo.get((row, c), 1.0)
        if v >= lo and key > best:
            best = key
            best_index = c
    top = simt.warp_max(best)
    index = -simt.warp_max(-best_index if best == top else -V)    # the lowest index holding the max
    for p in key_part.permits(simt.per_warp(1)):
        key_part[p] = top
    for p in index_part.permits(simt.per_warp(1)):
        index_part[p] = index
    simt.barrier()
    k = key_part.get(simt.lane(), -1.0)
    top = simt.warp_max(k)
    index = -simt.warp_max(-index_part.get(simt.lane(), V) if k == top else -V)
    for p in token.permits(simt.per_block(1)):       # thread 0 of block `row` holds token[row]
        token[p] = index
