"""The layout cache and outputs whose address spans meet without sharing a byte (two halves
of one packed row, as rope writes them): a launch of a seen layout at the distance the full
path found disjoint skips the full checks; at any other distance the full path decides (S7)."""
import pytest
import torch

import tilesafe as ts

HERE = __file__


@ts.kernel
def halves(y1: ts.Mut[ts.f32, ("B", "H")], y2: ts.Mut[ts.f32, ("B", "H")], x: ts.Ref[ts.f32, ("N", "M")],
           B: ts.Const[int], H: ts.Const[int], N: int, M: int):
    t = ts.load_tile_like(x, y1)                                  # (B, H)
    y1.store(t)
    y2.store(t * 2.0)


def _launch(y: torch.Tensor, lo2: int, x: torch.Tensor):
    """halves(y[:, :4], y[:, lo2:lo2 + 4], x) with new tilesafe objects."""
    yt = ts.from_torch(y)
    p1, p2 = yt[:, 0:4].partition((4, 4)), yt[:, lo2:lo2 + 4].partition((4, 4))
    try:
        halves(p1, p2, ts.from_torch(x))
    finally:
        p1.unpartition()
        p2.unpartition()


def test_halves_of_one_row_at_a_seen_distance_skip_the_full_checks(backend, binds):
    for seed in range(3):
        x = torch.rand(4, 4, generator=torch.Generator().manual_seed(seed))
        y = torch.full((4, 8), float("nan"))
        _launch(y, 4, x)
        torch.testing.assert_close(y, torch.cat([x, 2 * x], 1))
        if seed == 0:
            first = binds[0]
    assert binds[0] == first                                      # the later launches: the layout's verdicts


def test_an_input_over_an_output_in_a_seen_layout_is_refused(backend):
    """y1 and x in one row: at distance 4 their spans meet but share no byte; at distance 2
    (the same layouts) they share two columns, which only the full path can tell."""
    def launch(row, lo):
        rt = ts.from_torch(row)
        p1, p2 = rt[:, 0:4].partition((4, 4)), ts.zeros((4, 4)).partition((4, 4))
        try:
            halves(p1, p2, rt[:, lo:lo + 4])  # input-overlap-call
        finally:
            p1.unpartition()
            p2.unpartition()
    for _ in range(2):
        row = torch.rand(4, 8, generator=torch.Generator().manual_seed(2))
        launch(row, 4)
        torch.testing.assert_close(row[:, 0:4], row[:, 4:8])
    row = torch.rand(4, 8, generator=torch.Generator().manual_seed(3))
    before = row.clone()
    with pytest.raises(ts.AliasError) as e:
        launch(row, 2)
    assert e.value.message == "output `y1` of `halves` shares memory with argument `x`"
    assert e.value.loc is not None and e.value.loc.file == HERE
    assert torch.equal(row, before)
