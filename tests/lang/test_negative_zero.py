"""-0.0 keeps its sign on every backend: as a literal (fill, padding, `where`, an operand), a
`Const[float]`, a float argument, and the result of negating +0.0 (a tile or a float argument).

Triton 3.6 turns a literal -0.0 into +0.0 (`semantic.scalar_constant` takes any value == 0 for
the type's null value), computes `-x` as `0 - x` (+0.0 for x = +0.0), and its interpreter
keeps a float argument as a Python number, a constant again. The oracle is NumPy; results are
compared bit for bit, so +0.0 and -0.0 differ."""
import numpy as np
import pytest
from lang_helpers import NP

import tilesafe as ts

N = 12           # ragged: one tile of 8 and a partial one
TILE = (8,)
DTYPES = ["f32", "f16"]


@ts.kernel
def fill(z: ts.Mut["T", ("B",)], B: ts.Const[int], T: ts.Const[ts.DType]):
    z.store(ts.full((B,), -0.0, T))


@ts.kernel
def select(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], B: ts.Const[int], T: ts.Const[ts.DType], N: int):
    t = ts.load_tile_like(x, z)
    z.store(ts.where(t > 0.0, t, -0.0))


@ts.kernel
def plus(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], B: ts.Const[int], T: ts.Const[ts.DType], N: int):
    z.store(ts.load_tile_like(x, z) + -0.0)


@ts.kernel
def times(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], B: ts.Const[int], T: ts.Const[ts.DType], N: int):
    z.store(ts.load_tile_like(x, z) * -0.0)


@ts.kernel
def times_const(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], S: ts.Const[float], B: ts.Const[int],
                T: ts.Const[ts.DType], N: int):
    z.store(ts.load_tile_like(x, z) * S)


@ts.kernel
def times_arg(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], s: float, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s)


@ts.kernel
def times_negated_arg(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], s: float, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * -s)          # -s of s = +0.0 is -0.0: the sign flips x * s's zeros


@ts.kernel
def negate(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], B: ts.Const[int], T: ts.Const[ts.DType], N: int):
    z.store(-ts.load_tile_like(x, z))


@ts.kernel
def padded(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("M",)], B: ts.Const[int], T: ts.Const[ts.DType], M: int):
    z.store(ts.load(x, (ts.block_id(0),), (B,), padding=-0.0))     # x is shorter: its tail reads -0.0


X = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.0, -0.0, 3.0, -0.0, 0.0, -4.0])


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def run(kernel, dtype: str, device: str, *args, n=N, **kwargs) -> np.ndarray:
    z = ts.tensor(np.full(n, np.nan, NP[dtype]), device=device)
    p = z.partition(TILE)
    kernel(p, *args, **kwargs).sync()
    return p.unpartition().numpy()


def literal_cases(dtype: str, device: str) -> dict:
    """name -> (what the kernel wrote, NumPy's)."""
    x, T = X.astype(NP[dtype]), getattr(ts, dtype)
    t, nz = ts.tensor(x, device=device), np.array(-0.0, x.dtype)
    return {"fill": (run(fill, dtype, device, T=T), np.full(N, -0.0, x.dtype)),
            "where": (run(select, dtype, device, t, T=T), np.where(x > 0, x, nz)),
            "plus": (run(plus, dtype, device, t, T=T), x + nz),
            "times": (run(times, dtype, device, t, T=T), x * nz),
            "const": (run(times_const, dtype, device, t, S=-0.0, T=T), x * nz),
            "negate": (run(negate, dtype, device, t, T=T), -x)}


def argument_cases(device: str) -> dict:
    x = X.astype(np.float32)
    cases = {s: (run(times_arg, "f32", device, ts.tensor(x, device=device), s), x * np.float32(s)) for s in (-0.0, 0.0)}
    for s in (-0.0, 0.0):
        cases[f"-{s}"] = (run(times_negated_arg, "f32", device, ts.tensor(x, device=device), s), x * -np.float32(s))
    return cases


def padding_cases(dtype: str, device: str) -> dict:
    x = X[:5].astype(NP[dtype])
    got = run(padded, dtype, device, ts.tensor(x, device=device), n=8, T=getattr(ts, dtype))
    return {"padding": (got, np.concatenate([x, np.full(3, -0.0, x.dtype)]))}


def assert_same_bits(cases: dict) -> None:
    for name, (got, want) in cases.items():
        assert np.array_equal(bits(got), bits(want)), (name, got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_literal_negative_zero(backend, dtype):
    assert_same_bits(literal_cases(dtype, "cpu"))


def test_a_float_argument_keeps_its_sign(backend):
    assert_same_bits(argument_cases("cpu"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_padding_negative_zero(backend, dtype):
    assert_same_bits(padding_cases(dtype, "cpu"))
