"""Helpers for the Triton-backend tests: poisoned outputs and per-dtype tolerances (DESIGN §2).
Nothing here imports tilesafe internals."""
import ml_dtypes
import numpy as np

import tilesafe as ts

TOL = {"f32": dict(rtol=1e-5, atol=1e-5), "f16": dict(rtol=1e-2, atol=1e-2), "bf16": dict(rtol=2e-2, atol=2e-2),
       "tf32": dict(rtol=1e-3, atol=1e-3)}
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32, "i8": np.int8,
      "u8": np.uint8, "i16": np.int16, "i64": np.int64, "bool_": np.bool_}


POISON = {"f32": np.nan, "f16": np.nan, "bf16": np.nan, "i8": -99, "u8": 77, "bool_": True}


def poisoned(shape, dtype: str) -> ts.Tensor:
    """A written tensor holding a value no kernel here produces (NaN for floats)."""
    return ts.tensor(np.full(shape, POISON.get(dtype, -12345), NP[dtype]))


def close(got, want, dtype: str) -> None:
    got = np.asarray(got)
    assert not np.isnan(got.astype(np.float64)).any() or np.isnan(np.asarray(want, np.float64)).any()
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), **TOL[dtype])


@ts.kernel
def gemm(c: ts.Mut["T", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
         T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    """Tiled GEMM in any dtype: an fp32 accumulator over a K loop, stored as T."""
    pa = a.partition((BM, BK))
    pb = b.partition((BK, BN))
    acc = ts.zeros((BM, BN), ts.f32)
    for k in range(ts.num_tiles(pa, 1)):
        acc = ts.mma(pa.load((ts.block_id(0), k)), pb.load((k, ts.block_id(1))), acc)
    c.store(ts.astype(acc, T))


@ts.kernel
def persistent_gemm(c: ts.MutTiles["T", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
                    T: ts.Const[ts.DType], BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int],
                    M: int, N: int, K: int, G: ts.Const[int] = 8):
    """Persistent GEMM: each block walks output tiles in groups of G rows."""
    pa = a.partition((BM, BK))
    pb = b.partition((BK, BN))
    for idx in c.tiles(group=G):
        acc = ts.zeros((BM, BN), ts.f32)
        for k in range(ts.num_tiles(pa, 1)):
            acc = ts.mma(pa.load((idx[0], k)), pb.load((k, idx[1])), acc)
        c.store(ts.astype(acc, T), idx)
