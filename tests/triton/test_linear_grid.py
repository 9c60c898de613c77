"""Grids taller than CUDA's 65535 blocks on axes 1 and 2 are flattened to one axis."""
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.backends.triton import backend as triton_backend


@ts.kernel
def stamp(z: ts.Mut[ts.f32, (1, 4, 2)], x: ts.Ref[ts.f32, ("A", "B", "C")], A: int, B: int, C: int):
    """z = x + 1000*i + 100*j + 10*k + (number of blocks along each axis)."""
    i, j, k = ts.block_id(0), ts.block_id(1), ts.block_id(2)
    n = ts.num_blocks(0) + ts.num_blocks(1) * 7 + ts.num_blocks(2) * 49
    z.store(ts.load_tile_like(x, z) + (i * 1000 + j * 100 + k * 10 + n).astype(ts.f32))


def _expected(x):
    a, b, c = x.shape
    g = (a, -(-b // 4), -(-c // 2))
    i, j, k = np.meshgrid(np.arange(a), np.arange(b) // 4, np.arange(c) // 2, indexing="ij")
    return x + i * 1000 + j * 100 + k * 10 + (g[0] + g[1] * 7 + g[2] * 49)


@pytest.mark.parametrize("limit", [65535, 2])
def test_flattened_grid_gives_the_same_block_ids(monkeypatch, limit):
    monkeypatch.setattr(triton_backend, "MAX_GRID_YZ", limit)   # 2: force the flattened variant
    x = np.random.default_rng(5).standard_normal((2, 9, 5)).astype(np.float32)
    with ts.backend("triton-interpreter"):
        z = ts.full(x.shape, np.nan)
        out = stamp(z.partition((1, 4, 2)), ts.tensor(x)).sync().unpartition().numpy()
    np.testing.assert_allclose(out, _expected(x), rtol=1e-6)
    compiled = stamp.compile(ts.spec(x.shape, tile=(1, 4, 2)), ts.spec(x.shape), backend="triton-interpreter")
    flattened = [gen for (_, linear, _), (gen, _) in compiled._variants.items() if linear]
    assert bool(flattened) == (limit == 2)
    if flattened:
        assert "tl.program_id(1)" not in flattened[0].text and "grid2" in flattened[0].text


def test_needs_linear_grid():
    assert not triton_backend.needs_linear_grid((10**6, 65535, 3))
    assert triton_backend.needs_linear_grid((1, 65536))
    assert triton_backend.flat_grid((3, 4, 5)) == (60,)
