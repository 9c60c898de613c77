"""-0.0 in the PTX for Hopper (sm_90), compiled on any machine: Triton 3.6 alone would emit +0.0
for a literal -0.0 (`semantic.scalar_constant`) and `0 - x` for a negation. tilesafe emits the
literal as its bit pattern and the negation as `x * -1.0`, which LLVM turns into a sign-bit flip.
tests/lang/test_negative_zero.py checks the values on the CPU backends, the GPU test on the H200."""
import os
import sys
from pathlib import Path

import pytest

import tilesafe as ts
from tilesafe.runtime.compile_ahead import compile_ahead

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))
from test_negative_zero import fill, negate, padded, times  # noqa: E402  (the CPU cases' kernels)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 makes Triton's own library interpreted: it cannot compile")

SIGN = "-2147483648"       # 0x80000000 as PTX writes a b32 integer


def _body(kernel, *specs, **consts) -> str:
    ptx = compile_ahead(kernel, *specs, arch=90, T=ts.f32, **consts).asm["ptx"]
    return ptx[ptx.index(".entry"):ptx.index("$L__func_end0")]


def test_multiplying_by_a_literal_negative_zero():
    body = _body(times, ts.spec((12,), ts.f32, tile=(8,)), ts.spec((12,), ts.f32))
    assert "0f80000000" in body and "0f00000000" not in body


def test_a_negative_zero_fill_and_padding_store_the_sign_bit():
    assert f"mov.b32 \t%r1, {SIGN};" in _body(fill, ts.spec((12,), ts.f32, tile=(8,)))
    assert SIGN in _body(padded, ts.spec((8,), ts.f32, tile=(8,)), ts.spec((5,), ts.f32))


def test_negation_flips_the_sign_bit():
    body = _body(negate, ts.spec((12,), ts.f32, tile=(8,)), ts.spec((12,), ts.f32))
    assert "xor.b32" in body and SIGN in body and "sub.f32" not in body
