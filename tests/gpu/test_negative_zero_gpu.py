"""-0.0 keeps its sign on the GPU (run with `pytest -m gpu`): the cases of
tests/lang/test_negative_zero.py compiled by Triton for the device, compared bit for bit
with NumPy."""
import sys
from pathlib import Path

import pytest

import tilesafe as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))
from test_negative_zero import argument_cases, assert_same_bits, literal_cases, padding_cases  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _triton():
    with ts.backend("triton"):
        yield


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gpu_literal_negative_zero(dtype):
    assert_same_bits(literal_cases(dtype, "cuda"))


def test_gpu_a_float_argument_keeps_its_sign():
    assert_same_bits(argument_cases("cuda"))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gpu_padding_negative_zero(dtype):
    assert_same_bits(padding_cases(dtype, "cuda"))
