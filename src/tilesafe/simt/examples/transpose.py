"""2-D transpose through a padded shared-memory tile (the pad column avoids bank conflicts)."""
import tilesafe as ts
from tilesafe import simt

TILE = 32


@simt.kernel(contract=simt.Contract(block=(TILE, TILE)))
def transpose(out: simt.Disjoint[ts.f32, ("C", "R")], x: simt.Ref[ts.f32, ("R", "C")], R: int, C: int):
    tile = simt.shared((TILE, TILE + 1), ts.f32)
    bx, by = simt.block_id(0), simt.block_id(1)
    tx, ty = simt.thread_id(0), simt.thread_id(1)
    for p in tile.permits(simt.per_thread()):        # p = (thread y, thread x): coalesced reads along x's rows
        tile[p] = x.get((bx * TILE + p[0], by * TILE + p[1]), 0.0)
    simt.barrier()
    for p in out.permits(simt.per_thread()):         # p = (by*T + ty, bx*T + tx): out[r, c] = x[c, r]
        out[p] = tile[tx, ty]                        # x[bx*T + tx, by*T + ty], from the tile
