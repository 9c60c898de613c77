"""The order in which a persistent walk visits an output's tiles.

Shared by every backend so they agree on which block writes which tile: tile number `t`
(0 ≤ t < product(grid)) maps to coordinates with `group` rows of tiles visited together
(L2 reuse in GEMMs). Rank 3 walks the leading axis outermost.
"""
from __future__ import annotations


def tile_coords(t: int, grid: tuple[int, ...], group: int) -> tuple[int, ...]:
    if len(grid) == 1:
        return (t,)
    if len(grid) == 3:
        per_batch = grid[1] * grid[2]
        return (t // per_batch,) + tile_coords(t % per_batch, grid[1:], group)
    rows, cols = grid
    per_group = group * cols
    first_row = (t // per_group) * group
    group_rows = min(rows - first_row, group)
    within = t % per_group
    return (first_row + within % group_rows, within // group_rows)
