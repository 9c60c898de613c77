"""S11 under 32-bit wrap on the GPU (run with `pytest -m gpu`): the cases of
tests/lang/test_bounds_wrap.py through Triton on the device. Every tensor is a view in the
middle of a larger buffer of sentinels, so a read outside it returns a sentinel and a write
outside it changes one: results must equal the NumPy oracle (padding where out of range),
and the buffer around each view must be unchanged."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tilesafe as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))
from test_bounds_wrap import (add_then_divide, add_then_min, multiply_then_divide,  # noqa: E402  (the CPU cases' kernels)
                              multiply_then_min, rows_and_validity, tile_at, times_four, window_fill)

pytestmark = pytest.mark.gpu
PAD = -7.0
SENTINEL = 12345.0
MARGIN = 256          # elements of sentinels on each side of a view (1 KiB: keeps 16-byte alignment)


@pytest.fixture(autouse=True)
def _triton():
    with ts.backend("triton"):
        yield


def _i32(v: int) -> int:
    return int(np.array(v, np.int64).astype(np.int32))


def _tile(x: np.ndarray, i: int, s: int) -> np.ndarray:
    out = np.full(s, PAD, np.float32)
    for k in range(s):
        if 0 <= i * s + k < x.size:
            out[k] = x[i * s + k]
    return out


def _embedded(values: np.ndarray):
    """(the whole buffer, the view of `values` in its middle), on the GPU."""
    rows = values.shape[0]
    pad = (MARGIN,) + values.shape[1:]
    host = np.concatenate([np.full(pad, SENTINEL, np.float32), values.astype(np.float32),
                           np.full(pad, SENTINEL, np.float32)])
    buf = ts.tensor(host, device="cuda")
    return buf, buf[MARGIN:MARGIN + rows], host


def _untouched_around(buf, host, rows: int) -> None:
    now = buf.numpy()
    assert np.array_equal(now[:MARGIN], host[:MARGIN]) and np.array_equal(now[MARGIN + rows:], host[MARGIN + rows:])


# --- item 1: wrapped scalar arithmetic in a tile index -----------------------------------------
INDEX = {
    add_then_divide: lambda s: _i32(s + 2 ** 30) // 2 ** 30,
    multiply_then_divide: lambda s: _i32(s * 8) // 2 ** 30,
    multiply_then_min: lambda s: min(_i32(s * 4), 2),
    add_then_min: lambda s: min(_i32(s + 1), 2),
    times_four: lambda s: _i32(s * 4),
}
S = [0, 1, -1, 2, 2 ** 28, 2 ** 28 + 2 ** 27, 2 ** 29 + 1, 2 ** 30, 2 ** 30 + 1, 2 ** 31 - 1, -2 ** 31, -2 ** 30]


@pytest.mark.parametrize("kernel", list(INDEX), ids=lambda k: k.name)
def test_wrapped_index_reads_the_tile_it_names_or_padding(kernel):
    x = np.arange(1, 65, dtype=np.float32)
    buf, xv, host = _embedded(x)
    for s in S:
        y = ts.full((16,), np.nan, device="cuda")
        p = y.partition((16,))
        kernel(p, xv, s=s)
        np.testing.assert_array_equal(p.unpartition().numpy(), _tile(x, INDEX[kernel](s), 16), err_msg=f"s={s}")
    _untouched_around(buf, host, 64)


# --- item 2: tile indices whose element offsets pass 32 bits -----------------------------------
def test_tile_index_past_32_bit_offsets_reads_padding():
    x = np.arange(1, 201, dtype=np.float32)
    buf, xv, host = _embedded(x)
    for s in [0, 3, 2 ** 26 + 1, 2 ** 26 + 2, 2 ** 25 + 1, -(2 ** 26) + 1, -(2 ** 26) - 1, 2 ** 31 - 1, -2 ** 31,
              2 ** 33 + 1, -(2 ** 33) + 1]:
        y = ts.full((64,), np.nan, device="cuda")
        p = y.partition((64,))
        tile_at(p, xv, s=s)
        np.testing.assert_array_equal(p.unpartition().numpy(), _tile(x, s, 64), err_msg=f"s={s}")
    _untouched_around(buf, host, 200)


def test_a_broadcast_axis_past_32_bits_reads_its_value():
    x = ts.from_torch(torch.full((1,), 3.0, device="cuda").expand(2 ** 31 + 100))
    y = ts.full((64,), np.nan, device="cuda")
    p = y.partition((64,))
    tile_at(p, x, s=2 ** 25 + 1)
    np.testing.assert_array_equal(p.unpartition().numpy(), np.where(np.arange(64) < 36, 3.0, PAD).astype(np.float32))


def test_two_axis_tile_and_its_valid_mask_under_wrap():
    x = np.arange(1, 40 * 32 + 1, dtype=np.float32).reshape(40, 32)
    buf, xv, host = _embedded(x)
    for s in [0, 2, 2 ** 27 + 1, 2 ** 28 + 1, -(2 ** 28) + 2]:
        y = ts.full((16, 32), np.nan, device="cuda")
        v = ts.zeros((16, 32), dtype=ts.i32, device="cuda")
        py, pv = y.partition((16, 16)), v.partition((16, 16))
        rows_and_validity(py, pv, xv, s=s)
        want = np.full((16, 32), PAD, np.float32)
        for r in range(16):
            if 0 <= s * 16 + r < 40:
                want[r] = x[s * 16 + r]
        np.testing.assert_array_equal(py.unpartition().numpy(), want, err_msg=f"s={s}")
        np.testing.assert_array_equal(pv.unpartition().numpy(), (want != PAD).astype(np.int32), err_msg=f"s={s}")
    _untouched_around(buf, host, 40)


@pytest.mark.parametrize("start, count, written", [(1, 1, [1]), (2 ** 26 + 1, 1, []), (-(2 ** 26), 1, []),
                                                   (2 ** 31 - 1, 2, []), (2 ** 26 - 1, 3, [])])
def test_window_far_past_the_end_writes_nothing_anywhere(start, count, written):
    z0 = np.full(150, 999.0, np.float32)
    buf, zv, host = _embedded(z0)
    p = zv.partition((64,))
    window_fill(p, start, count)
    p.unpartition()
    want = host.copy()
    for t in written:
        want[MARGIN + t * 64:MARGIN + min((t + 1) * 64, 150)] = 5.0
    np.testing.assert_array_equal(buf.numpy(), want)
