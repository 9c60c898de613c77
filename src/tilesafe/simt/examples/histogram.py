"""Histogram of small integers with atomic adds (the target is a simt.Atomic parameter)."""
import tilesafe as ts
from tilesafe import simt

BLOCK = 256


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def histogram(hist: simt.Atomic[ts.i32, ("B",)], x: simt.Ref[ts.i32, ("N",)], B: int, N: int):
    # A grid-stride loop over the input; the grid is chosen at launch (no output permits to derive it from).
    for i in range(simt.global_id(), N, simt.grid_dim() * BLOCK):
        hist.add(x[i], 1)         # an out-of-range bin is a failed check, reported at sync


def launch(hist, x, blocks: int = 0):
    """Count x's values into hist (which must start at zero); `blocks` = 0 picks one per 4 blocks' worth."""
    n = x.shape[0]
    blocks = blocks or max(1, min(-(-n // (BLOCK * 4)), 4096))
    return histogram.launch(hist, x, grid=(blocks,))
