"""Block reductions through warp sums and shared memory: per-slab sums (block_sum: out[b] = the sum of
x's slab b of K elements) and the whole sum with one atomic per block (sum_all)."""
import tilesafe as ts
from tilesafe import simt

BLOCK = 256
WARPS = BLOCK // 32
RUNS = 4                # sum_all's runs of 4 elements in flight a thread (16 elements)
BLOCKS_PER_SM = 16      # sum_all's grid: on the H200 16 blocks an SM ran at 96% of a copy's bandwidth, 8 at 92%


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def block_sum(out: simt.Disjoint[ts.f32, ("B",)], x: simt.Ref[ts.f32, ("N",)], B: int, N: int,
              K: simt.Const[int]):
    partial = simt.shared((WARPS,), ts.f32)          # one partial sum per warp
    acc = 0.0
    first = simt.block_id() * K + simt.thread_id()
    for j in range(K // BLOCK):                      # the slab, BLOCK apart: a constant trip count, so the
        acc += x.get(first + j * BLOCK, 0.0)         # loop unrolls and its K // BLOCK reads are in flight
    if K % BLOCK:                                    # (the ragged last slab reads 0 past N)
        if simt.thread_id() < K % BLOCK:
            acc += x.get(first + K // BLOCK * BLOCK, 0.0)
    acc = simt.warp_sum(acc)                         # every lane holds its warp's sum
    for p in partial.permits(simt.per_warp(1)):      # lane 0 of each warp holds partial[warp]
        partial[p] = acc
    simt.barrier()                                   # partials written; now every thread may read them
    total = simt.warp_sum(partial.get(simt.lane(), 0.0))
    for p in out.permits(simt.per_block(1)):         # thread 0 of block b holds out[b]
        out[p] = total


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def sum_all(total: simt.Atomic[ts.f32, (1,)], x: simt.Ref[ts.f32, ("N",)], N: int):
    """total[0] += the sum of x: two levels (warp shuffles, then the block's warps through shared
    memory) and one atomic per block; a grid-stride loop over runs of 4 elements (`x.run(i, 4)`: one
    128-bit load when x is 16-byte aligned), RUNS runs in flight a thread."""
    partial = simt.shared((WARPS,), ts.f32)
    stride = simt.grid_dim() * BLOCK * 4             # a grid step: 4 elements a thread
    acc = 0.0
    i = simt.global_id() * 4
    while i + (RUNS - 1) * stride + 3 < N:           # RUNS whole runs, all inside x
        for u in range(RUNS):
            a, b, c, d = x.run(i + u * stride, 4)
            acc += (a + b) + (c + d)
        i += RUNS * stride
    while i + 3 < N:                                 # the rest of this thread's whole runs
        a, b, c, d = x.run(i, 4)
        acc += (a + b) + (c + d)
        i += stride
    for j in range(3):                               # a run cut by the end of x (at most one thread's)
        acc += x.get(i + j, 0.0)
    acc = simt.warp_sum(acc)
    for p in partial.permits(simt.per_warp(1)):      # lane 0 of each warp holds partial[warp]
        partial[p] = acc
    simt.barrier()
    block_total = simt.warp_sum(partial.get(simt.lane(), 0.0))
    if simt.thread_id() == 0:
        total.add(0, block_total)                    # one atomic per block


def launch_sum(total, x, blocks: int = 0):
    """total[0] += x.sum() (total must be initialised, e.g. ts.zeros(1)); `blocks` = 0: BLOCKS_PER_SM
    blocks of 256 threads per SM (from the device's SM count), or 2 blocks on the CPU."""
    if not blocks:
        import torch
        t = x if isinstance(x, torch.Tensor) else x._torch()
        if t.device.type == "cuda":
            blocks = torch.cuda.get_device_properties(t.device).multi_processor_count * BLOCKS_PER_SM
        else:
            blocks = 2
        blocks = max(1, min(blocks, -(-t.numel() // BLOCK)))
    return sum_all.launch(total, x, grid=(blocks,))
