"""Histograms of small integers with atomic adds: straight into the global target (a simt.Atomic
parameter), and privatised per block in shared memory (histogram256)."""
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


BINS = 256


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def histogram256(hist: simt.Atomic[ts.i32, (BINS,)], x: simt.Ref[ts.i32, ("N",)], N: int):
    # Each block counts into its own shared-memory bins (fast atomics, little contention), then
    # adds its bins to the global histogram once: three phases separated by barriers.
    bins = simt.shared((BINS,), ts.i32)
    for p in bins.permits(simt.per_thread()):     # BINS == BLOCK: one bin per thread
        bins[p] = 0
    simt.barrier()
    for i in range(simt.global_id(), N, simt.grid_dim() * BLOCK):
        bins.add(x[i], 1)                         # an out-of-range value is a failed check
    simt.barrier()
    hist.add(simt.thread_id(), bins[simt.thread_id()])


def launch256(hist, x, blocks: int = 0):
    """Count x's values (0 <= v < 256) into hist (which must start at zero) through shared-memory bins."""
    n = x.shape[0]
    blocks = blocks or max(1, min(-(-n // (BLOCK * 16)), 1024))
    return histogram256.launch(hist, x, grid=(blocks,))
