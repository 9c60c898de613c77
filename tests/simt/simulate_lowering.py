"""Run the numba-cuda lowering of the SIMT examples under numba's CUDA simulator.

Run as a script in its own process: NUMBA_ENABLE_CUDASIM is read when numba-cuda is imported,
so the simulator is chosen per process (test_simt_lowering.py starts it). Each example's
generated source is compiled by `cuda.jit` and launched on NumPy arrays with the grid the
tilesafe launch would use; results are compared with NumPy written here. Prints one
`ok <name>` line per example.
"""
import math
import os
import sys

import numpy as np

assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run with NUMBA_ENABLE_CUDASIM=1"

from numba import cuda                                       # noqa: E402
from numba.cuda import types as nt                           # noqa: E402

import tilesafe as ts                                                         # noqa: E402
from tilesafe import simt                                                     # noqa: E402
from tilesafe.simt.examples import histogram, sgemm, transpose, vector_add   # noqa: E402

CUBES = simt.table(np.arange(8, dtype=np.float32) ** 3)


@simt.kernel(contract=simt.Contract(block=(32,)))
def cube_lookup(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.i32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = CUBES[x[p]]


def compiled(kernel, consts):
    name = f"simt_{kernel.name}"
    namespace = {"cuda": cuda, "math": math, "__types": nt, "__f32": np.float32, **kernel.table_globals()}
    exec(compile(kernel.source_for(consts), f"<{name}>", "exec"), namespace)
    return cuda.jit(namespace[name])


def check(name, got, want, **tol):
    np.testing.assert_allclose(got, want, **tol)
    print("ok", name, flush=True)


def main():
    rng = np.random.default_rng(0)
    err = np.zeros(1, np.int32)

    n = 200
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    compiled(vector_add.vector_add, {})[(1,), (256,)](out, x, y, n, err)
    check("vector_add", out, x + y)

    if "--all" in sys.argv:
        out[:] = np.nan
        compiled(vector_add.vector_add_chunked, {"K": 2})[(1,), (256,)](out, x, y, n, err)
        check("vector_add_chunked", out, x + y)

    v = rng.integers(0, 7, 500).astype(np.int32)
    hist = np.zeros(7, np.int32)
    compiled(histogram.histogram, {})[(1,), (256,)](hist, v, 7, 500, err)
    check("histogram", hist, np.bincount(v, minlength=7))

    if "--all" in sys.argv:     # 1024 threads a block: slow under the simulator, so not in CI
        a = rng.standard_normal((20, 33), dtype=np.float32)
        t = np.full((33, 20), np.nan, np.float32)
        compiled(transpose.transpose, {})[(1, 2), (32, 32)](t, a, 20, 33, err)
        check("transpose", t, a.T)

    a = rng.standard_normal((12, 21), dtype=np.float32)     # K = 21: two tiles, the second ragged
    b = rng.standard_normal((21, 10), dtype=np.float32)
    c = np.full((12, 10), np.nan, np.float32)
    compiled(sgemm.sgemm, {})[(1, 1), (16, 16)](c, a, b, 12, 10, 21, err)
    check("sgemm", c, a @ b, rtol=1e-4, atol=1e-4)

    idx = rng.integers(0, 8, 20).astype(np.int32)
    cubes = np.full(20, np.nan, np.float32)
    compiled(cube_lookup, {})[(1,), (32,)](cubes, idx, 20, err)
    check("constant_table", cubes, idx.astype(np.float32) ** 3)

    bad = np.array([0, 9, 1], np.int32)                     # 9 is outside the 7 bins: the check flags it
    hist[:] = 0
    compiled(histogram.histogram, {})[(1,), (256,)](hist, bad, 7, 3, err)
    assert err[0] == histogram.histogram.src.loc(histogram.histogram.info.atomics[0]).line, err
    check("histogram_flag", hist, np.array([1, 1, 0, 0, 0, 0, 0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
