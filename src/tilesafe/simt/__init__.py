"""tilesafe.simt: thread-level kernels with per-thread write permits and launch contracts.

    from tilesafe import simt
    import tilesafe as ts

    @simt.kernel(contract=simt.Contract(block=(256,)))
    def add(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], y: simt.Ref[ts.f32, ("N",)], N: int):
        for p in out.permits(simt.per_thread()):
            out[p] = x[p] + y[p]

    add(out, x, y).sync()    # grid derived from out's permits; CPU tensors run on the CPU executor

See docs/simt.md.
"""
from .constant import Table, table
from .contract import Contract
from .kernel import SimtKernel, kernel
from .mappings import at, chunk, grid_stride, per_block, per_thread, per_warp, run
from .params import Atomic, Const, Disjoint, Ref
from .stubs import (ballot, barrier, block_dim, block_id, global_id, grid_dim, lane, shared, shfl_down, shfl_xor,
                    thread_id, warp_id, warp_max, warp_sum)

__all__ = ["Table", "table", "Contract", "SimtKernel", "kernel", "at", "chunk", "grid_stride", "per_block",
           "per_thread", "per_warp", "run", "Atomic", "Const", "Disjoint", "Ref", "ballot", "barrier", "block_dim",
           "block_id", "global_id", "grid_dim", "lane", "shared", "shfl_down", "shfl_xor", "thread_id", "warp_id",
           "warp_max", "warp_sum"]
