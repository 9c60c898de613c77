"""S16 on the GPU with the members' tiles stored on every path rather than at the top level
(both branches of an if, a static loop): the group's last block still reads final tiles under
real concurrency (run with `pytest -m gpu`). The kernels are tests/lang/test_last_arrival.py's."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tilesafe as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lang"))
from test_last_arrival import split_rows_branching, split_rows_in_halves  # noqa: E402

pytestmark = pytest.mark.gpu
S, N, B = 16, 1 << 16, 256


def _run(kernel, x: np.ndarray, **scalars) -> np.ndarray:
    c = ts.full((N,), np.nan, device="cuda")
    part = ts.full((S, N), np.nan, device="cuda")
    pc, pp = c.partition((B,)), part.partition((1, B))
    kernel(pc, pp, ts.tensor(x, device="cuda"), **scalars)
    pc.unpartition(), pp.unpartition()
    return c.numpy()


@pytest.mark.parametrize("cut", [0, 5, S])
def test_members_stored_on_both_branches(cut):
    x = np.random.default_rng(cut).standard_normal((S, N)).astype(np.float32)
    want = (x.astype(np.float64) * np.where(np.arange(S) < cut, 2.0, 1.0)[:, None]).sum(0)
    for _ in range(3):                         # repeated: the counters reset between launches
        np.testing.assert_allclose(_run(split_rows_branching, x, cut=cut), want, rtol=1e-5, atol=1e-4)


def test_members_stored_in_a_static_loop():
    x = np.random.default_rng(7).standard_normal((S, N)).astype(np.float32)
    want = 3 * x.astype(np.float64).sum(0)
    np.testing.assert_allclose(_run(split_rows_in_halves, x), want, rtol=1e-5, atol=1e-4)
