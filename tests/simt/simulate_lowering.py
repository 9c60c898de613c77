"""Run the numba-cuda lowering of the SIMT examples under numba's CUDA simulator.

Run as a script in its own process: NUMBA_ENABLE_CUDASIM is read when numba-cuda is imported,
so the simulator is chosen per process (test_simt_lowering.py starts it). Each example's
generated source is compiled by `cuda.jit` and launched on NumPy arrays with the grid the
tilesafe launch would use; results are compared with NumPy written here. Prints one
`ok <name>` line per example.

The simulator has no warp operations; `_with_warp_operations` gives it shuffles and ballots
built on its block barrier (each lane posts its value, the block synchronises, each lane reads
its source lane's). That is right for kernels whose warp operations every thread of the block
reaches together, as in the examples run here.
"""
import math
import os
import sys
import threading

import numpy as np

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run with NUMBA_ENABLE_CUDASIM=1"

from numba import cuda                                       # noqa: E402
from numba.cuda import types as nt                           # noqa: E402

import tilesafe as ts                                                         # noqa: E402
from tilesafe import simt                                                     # noqa: E402
from tilesafe.simt.examples import histogram, sgemm, transpose, vector_add   # noqa: E402

from tilesafe.simt.examples import block_sum, row_rotate, softmax_rows, top_p  # noqa: E402
from tilesafe.simt.vector_access import simulated                              # noqa: E402


def _with_warp_operations():
    from numba.cuda.simulator import kernelapi
    posted = {}

    def exchange(module, value):
        """Every lane's value of this thread's warp, after a block-wide barrier."""
        th = threading.current_thread()
        bd = module.blockDim
        tid = th.threadIdx.x + bd.x * (th.threadIdx.y + bd.y * th.threadIdx.z)
        slots = posted.setdefault((th.blockIdx.x, th.blockIdx.y, th.blockIdx.z), {})
        slots[tid] = value
        th.syncthreads()
        base = tid - tid % 32
        lanes = [slots[base + i] for i in range(32) if base + i in slots]
        th.syncthreads()
        return tid % 32, lanes

    def shfl_xor(module, mask, value, m):
        lane, lanes = exchange(module, value)
        m &= 31                          # PTX shfl.sync reads the low five bits of its lane operand
        return lanes[lane ^ m] if (lane ^ m) < len(lanes) else value

    def shfl_down(module, mask, value, d):
        lane, lanes = exchange(module, value)
        d &= 31
        return lanes[lane + d] if lane + d < len(lanes) else value

    def ballot(module, mask, predicate):
        _, lanes = exchange(module, bool(predicate))
        return sum(1 << i for i, p in enumerate(lanes) if p)

    kernelapi.FakeCUDAModule.shfl_xor_sync = shfl_xor
    kernelapi.FakeCUDAModule.shfl_down_sync = shfl_down
    kernelapi.FakeCUDAModule.ballot_sync = ballot


CUBES = simt.table(np.arange(8, dtype=np.float32) ** 3)


@simt.kernel(contract=simt.Contract(block=(32,)))
def cube_lookup(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.i32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = CUBES[x[p]]


def compiled(kernel, consts):
    name = f"simt_{kernel.name}"
    namespace = {"cuda": cuda, "math": math, "__types": nt, "__f32": np.float32, **simulated(),
                 **kernel.table_globals()}
    exec(compile(kernel.source_for(consts), f"<{name}>", "exec"), namespace)
    return cuda.jit(namespace[name])


def check(name, got, want, **tol):
    np.testing.assert_allclose(got, want, **tol)
    print("ok", name, flush=True)


def main():
    _with_warp_operations()
    rng = np.random.default_rng(0)
    err = np.zeros(1, np.int32)

    n = 200
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    compiled(vector_add.vector_add, {})[(1,), (256,)](out, x, y, n, err)
    check("vector_add", out, x + y)

    n2 = 1500                           # K = 4: block 0's runs are whole (loads first), block 1's ragged
    x2, y2 = rng.standard_normal(n2, dtype=np.float32), rng.standard_normal(n2, dtype=np.float32)
    out2 = np.full(n2, np.nan, np.float32)
    compiled(vector_add.vector_add_chunked, {"K": 4})[(2,), (256,)](out2, x2, y2, n2, err)
    check("vector_add_chunked", out2, x2 + y2)
    out2[:] = np.nan                    # run(4): 128-bit runs where whole and aligned, the guarded loop after
    compiled(vector_add.vector_add_runs, {"K": 4})[(2,), (256,)](out2, x2, y2, n2, err)
    check("vector_add_runs", out2, x2 + y2)

    v = rng.integers(0, 7, 500).astype(np.int32)
    hist = np.zeros(7, np.int32)
    compiled(histogram.histogram, {})[(1,), (256,)](hist, v, 7, 500, err)
    check("histogram", hist, np.bincount(v, minlength=7))

    w = rng.integers(0, 256, 700).astype(np.int32)
    bins = np.zeros(256, np.int32)
    compiled(histogram.histogram256, {})[(1,), (256,)](bins, w, 700, err)
    check("histogram256", bins, np.bincount(w, minlength=256))

    a = rng.standard_normal((100, 64), dtype=np.float32)    # tile (0, 0) whole (loads first), tile (1, 0) ragged
    t = np.full((64, 100), np.nan, np.float32)
    compiled(transpose.transpose, {})[(2, 1), (64, 8)](t, a, 100, 64, err)
    check("transpose", t, a.T)

    a = rng.standard_normal((12, 21), dtype=np.float32)     # K = 21: two tiles, the second ragged
    b = rng.standard_normal((21, 10), dtype=np.float32)
    c = np.full((12, 10), np.nan, np.float32)
    compiled(sgemm.sgemm, {})[(1, 1), (16, 16)](c, a, b, 12, 10, 21, err)
    check("sgemm", c, a @ b, rtol=1e-4, atol=1e-4)

    checked = simt.kernel(contract=sgemm.sgemm.contract, sanitize=True)(sgemm.sgemm.fn)   # shadow bits on
    c[:] = np.nan
    compiled(checked, {})[(1, 1), (16, 16)](c, a, b, 12, 10, 21, err)
    assert err[0] == 0, err                                  # every shared element read was written
    check("sgemm_sanitized", c, a @ b, rtol=1e-4, atol=1e-4)

    idx = rng.integers(0, 8, 20).astype(np.int32)
    cubes = np.full(20, np.nan, np.float32)
    compiled(cube_lookup, {})[(1,), (32,)](cubes, idx, 20, err)
    check("constant_table", cubes, idx.astype(np.float32) ** 3)

    x = rng.standard_normal(300, dtype=np.float32)
    sums = np.full(2, np.nan, np.float32)
    compiled(block_sum.block_sum, {"K": 256})[(2,), (256,)](sums, x, 2, 300, err)
    check("block_sum", sums, [x[:256].sum(), x[256:].sum()], rtol=1e-5, atol=1e-4)

    total = np.full(1, 2.0, np.float32)                     # one atomic per block; 2 blocks, 4-wide loop and rest
    compiled(block_sum.sum_all, {})[(2,), (256,)](total, x, 300, err)
    check("sum_all", total, [x.astype(np.float64).sum() + 2.0], rtol=1e-5, atol=1e-4)
    x5 = rng.standard_normal(5000, dtype=np.float32)
    total[:] = 0
    compiled(block_sum.sum_all, {})[(2,), (256,)](total, x5, 5000, err)
    check("sum_all_wide", total, [x5.astype(np.float64).sum()], rtol=1e-4, atol=1e-3)

    rows = rng.standard_normal((3, 40), dtype=np.float32) * 3
    soft = np.full((3, 40), np.nan, np.float32)
    compiled(softmax_rows.softmax_rows, {})[(1,), (128,)](soft, rows, 3, 40, err)
    e = np.exp(rows - rows.max(1, keepdims=True))
    check("softmax_rows", soft, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)

    if "--all" in sys.argv:
        probs = np.exp(rows) / np.exp(rows).sum(1, keepdims=True)
        expo = rng.exponential(size=(3, 40)).astype(np.float32)
        token = np.full(3, -1, np.int32)
        compiled(top_p.top_p_sample, {"STEPS": 24})[(3,), (256,)](token, probs, expo, np.float32(0.9), 3, 40, err)
        want = []
        for p, ex in zip(probs, expo):
            order = np.argsort(-p)
            kept = order[:int((np.cumsum(p[order]) < 0.9).sum()) + 1]
            want.append(kept[np.argmax(p[kept] / ex[kept])])
        check("top_p", token, want)

    rows = rng.standard_normal((3, 100), dtype=np.float32)     # dynamic shared memory: 100 f32 a block
    rotated = np.full((3, 100), np.nan, np.float32)
    compiled(row_rotate.rotate_rows, {})[(3,), (64,), 0, 400](rotated, rows, 3, 100, err)
    check("row_rotate_dynamic", rotated, np.roll(rows, -1, axis=1))

    rows = rng.standard_normal((2, 257), dtype=np.float32)     # sanitized: element 256 is never staged
    rotated = np.full((2, 257), np.nan, np.float32)
    pool = -(-257 * 4 // 16) * 16 + 257                       # the row, then its shadow bytes
    compiled(row_rotate.rotate_rows_checked, {})[(2,), (64,), 0, pool](rotated, rows, 2, 257, err)
    k = row_rotate.rotate_rows_checked
    line = next(k.src.loc(node).line for name, node in k.info.checked if name == "row")
    assert err[0] == (1 << 24) + line, (err, line)
    err[0] = 0
    check("shared_sanitizer_flag", rotated[:, :255], np.roll(rows, -1, axis=1)[:, :255])

    from test_simt_unsafe import scatter                     # an unsafe write sets its element's mask byte
    idx = np.array([3, 0, 2], np.int32)
    scattered, wrote = np.full(5, np.nan, np.float32), np.zeros(5, np.uint8)
    compiled(scatter, {})[(1,), (64,)](scattered, idx, 3, 5, err, wrote)
    assert scattered[3] == 0 and scattered[0] == 1 and scattered[2] == 2, scattered
    check("unsafe_write_mask", wrote, [1, 0, 1, 1, 0])

    bad = np.array([0, 9, 1], np.int32)                     # 9 is outside the 7 bins: the check flags it
    hist[:] = 0
    compiled(histogram.histogram, {})[(1,), (256,)](hist, bad, 7, 3, err)
    assert err[0] == histogram.histogram.src.loc(histogram.histogram.info.atomics[0]).line, err
    check("histogram_flag", hist, np.array([1, 1, 0, 0, 0, 0, 0]))

    err[0] = 0      # a failed checked read: recorded without a branch, added to the flag at the thread's end
    got = np.full(4, np.nan, np.float32)
    src = np.arange(5, dtype=np.float32)
    compiled(gather, {})[(1,), (32,)](got, src, np.array([4, 0, 7, 1], np.int32), 4, 5, err)
    assert err[0] == gather.src.loc(gather.info.checked[0][1]).line, err
    check("checked_read_flag", got, [4, 0, 0, 1])     # the failed read gives element 0
    return 0


@simt.kernel(contract=simt.Contract(block=(32,)))
def gather(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("M",)], idx: simt.Ref[ts.i32, ("N",)],
           N: int, M: int):
    for p in out.permits(simt.per_thread()):
        out[p] = x[idx[p]]


if __name__ == "__main__":
    sys.exit(main())
