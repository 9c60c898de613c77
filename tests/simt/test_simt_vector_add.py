"""Vector add through the SIMT route on the CPU executor, against torch written here."""
import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe.simt.examples.vector_add import vector_add, vector_add_chunked


@pytest.mark.parametrize("n", [1, 255, 256, 700])
def test_vector_add_matches_torch(n):
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    out = torch.full((n,), float("nan"))
    result = vector_add(out, x, y).sync()
    assert result is out
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_chunked_permits_cover_every_element():
    n = 1000                                   # 256 threads x 3 per thread = 768 per block: 2 blocks, ragged
    x, y = torch.arange(n, dtype=torch.float32), torch.ones(n)
    out = torch.full((n,), float("nan"))
    vector_add_chunked(out, x, y, K=3).sync()
    torch.testing.assert_close(out, x + 1)


def test_tilesafe_tensors_and_initialisation():
    x = ts.tensor(np.arange(300, dtype=np.float32))
    y = ts.ones(300)
    out = ts.empty(300)                        # write-only until the launch covers it (S14)
    vector_add(out, x, y).sync()
    np.testing.assert_array_equal(out.numpy(), np.arange(300, dtype=np.float32) + 1)


def test_grid_is_derived_and_an_explicit_grid_must_match():
    x, y, out = torch.ones(600), torch.ones(600), torch.empty(600)
    vector_add.launch(out, x, y, grid=(3,)).sync()
    assert torch.all(out == 2)
