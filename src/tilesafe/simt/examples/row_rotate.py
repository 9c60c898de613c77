"""Dynamic shared memory: each block stages one row of a launch-time length S in shared memory.

`simt.shared((S,), ts.f32)` with `S: int` (a uniform runtime scalar) is sized at launch, so one
compiled kernel serves every row length; the launch checks S x 4 bytes against the contract's
`shared_memory` and the device. Each thread writes its chunk of the row through its permits, the
barrier ends the phase, then block b writes row b rotated left by one. A row longer than the
block's chunks (BLOCK * CHUNK elements) leaves shared elements nobody wrote: the CPU executor
reports the read, and so does the GPU for `rotate_rows_checked` (sanitize=True).
"""
import tilesafe as ts
from tilesafe import simt

BLOCK = 64
CHUNK = 4      # rows of up to BLOCK * CHUNK = 256 elements are staged whole


def rotate_rows(out: simt.Disjoint[ts.f32, ("B", "S")], x: simt.Ref[ts.f32, ("B", "S")], B: int, S: int):
    row = simt.shared((S,), ts.f32)                  # dynamic: S elements, S given at launch
    b = simt.block_id()
    for p in row.permits(simt.chunk(CHUNK)):         # thread t holds t, t + 64, t + 128, t + 192 (below S)
        row[p] = x[b, p[0]]
    simt.barrier()
    for p in out.permits(simt.per_block()):          # block b holds row b: p = (b, j), threads stride by 64
        out[p] = row[(p[1] + 1) % S]


rotate_rows_checked = simt.kernel(contract=simt.Contract(block=(BLOCK,)), sanitize=True)(rotate_rows)
rotate_rows = simt.kernel(contract=simt.Contract(block=(BLOCK,)))(rotate_rows)
