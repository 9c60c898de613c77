"""Vector add: one element per thread; K elements per thread strided by the block (chunk: coalesced
scalar loads, all K in flight); K consecutive elements per thread (run: with K = 4, one 128-bit load
per input and one 128-bit store, when the tensors are 16-byte aligned)."""
import tilesafe as ts
from tilesafe import simt

BLOCK = 256


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def vector_add(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], y: simt.Ref[ts.f32, ("N",)],
               N: int):
    for p in out.permits(simt.per_thread()):    # thread g holds element g, if g < N
        out[p] = x[p] + y[p]                    # reads proven in bounds: x, y and out share N


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def vector_add_chunked(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)],
                       y: simt.Ref[ts.f32, ("N",)], N: int, K: simt.Const[int]):
    for p in out.permits(simt.chunk(K)):        # K elements per thread, strided by the block (coalesced)
        out[p] = x[p] + y[p]


@simt.kernel(contract=simt.Contract(block=(BLOCK,)))
def vector_add_runs(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)],
                    y: simt.Ref[ts.f32, ("N",)], N: int, K: simt.Const[int]):
    for p in out.permits(simt.run(K)):          # K consecutive elements per thread: 4 x f32 = 128 bits
        out[p] = x[p] + y[p]
