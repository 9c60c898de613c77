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
