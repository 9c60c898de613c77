"""A user kernel launched with new tilesafe tensors from torch every call (launch_cache.LayoutPlan.
direct on the GPU: from a layout's fourth launch with one set of runtime scalars the launch
starts Triton's compiled kernel straight from the objects). Every call computes what torch
computes with new memory, a host read waits for it (S9), work of another stream is ordered
before it (S10), and an alias of a seen layout is still refused. Run with `pytest -m gpu`."""
import math

import pytest
import torch

import tilesafe as ts
from tilesafe.runtime import prepared_launch

pytestmark = pytest.mark.gpu


@ts.kernel
def scale_add(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)], s: float,
              B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s + ts.load_tile_like(y, z))


def _launch(z, x, y, s=0.5):
    p = ts.from_torch(z).partition((256,))
    scale_add(p, ts.from_torch(x), ts.from_torch(y), s)
    return p.unpartition()


@pytest.fixture
def started(monkeypatch):
    """One entry per launch that took the direct form (a LayoutLauncher's written-out `_direct`,
    which LayoutLauncher.direct and the layouts' own direct launches both run)."""
    calls = []
    real = prepared_launch.layout_direct

    def counting_form(launcher):
        form = real(launcher)

        def counting(self, *args):
            calls.append(True)
            return form(self, *args)
        return counting
    monkeypatch.setattr(prepared_launch, "layout_direct", counting_form)
    scale_add._layouts.forget()            # launchers made from here on count
    scale_add._last_plan = None
    return calls


def test_new_tensors_every_launch_compute_right_through_the_direct_form(started):
    with ts.backend("triton"):
        for seed in range(8):
            g = torch.Generator(device="cuda").manual_seed(seed)
            x, y = (torch.randn(1000, device="cuda", generator=g) for _ in range(2))
            z = torch.full((1000,), float("nan"), device="cuda")
            got = _launch(z, x, y).numpy()                         # a host read waits for the launch
            torch.testing.assert_close(torch.from_numpy(got), (x * 0.5 + y).cpu())
    assert any(started), "no launch took the direct form"


def test_another_streams_pending_write_is_ordered_before_a_direct_launch():
    with ts.backend("triton"):
        x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
        for _ in range(4):
            _launch(torch.empty(1000, device="cuda"), x, y)
        side = torch.cuda.Stream()
        src = ts.from_torch(torch.full((1000,), 3.0, device="cuda"))
        xt = ts.from_torch(x)
        side.wait_stream(torch.cuda.current_stream())              # src is written before the side reads it
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)                           # the write lands late on its stream
            xt.copy_(src)                                           # pending on `side` (S9)
        z = torch.empty(1000, device="cuda")
        out = _launch(z, x, y).numpy()
        torch.testing.assert_close(torch.from_numpy(out), (torch.full((1000,), 1.5, device="cuda") + y).cpu())


def test_an_alias_in_a_layout_with_a_direct_launcher_is_refused():
    with ts.backend("triton"):
        base = torch.randn(2000, device="cuda")
        for _ in range(4):
            _launch(base[:1000], base[1000:], base[1000:])          # disjoint: fine
        p = ts.from_torch(base[:1000]).partition((256,))
        before = base.clone()
        with pytest.raises(ts.AliasError, match="output `z` of `scale_add` shares memory with argument `x`"):
            scale_add(p, ts.from_torch(base[500:1500]), ts.from_torch(base[1000:]), 0.5)
        p.unpartition()
        torch.cuda.synchronize()
        assert torch.equal(base, before)


def test_a_launcher_made_for_zero_does_not_serve_negative_zero():
    # -0.0 == 0.0 in Python, but the launcher's argument tuple holds its own value: with
    # y = -0.0, x * 0.0 + y is +0.0 and x * -0.0 + y is -0.0 (Triton passes floats unspecialized).
    with ts.backend("triton"):
        x = torch.rand(1000, device="cuda") + 0.5
        y = torch.full((1000,), -0.0, device="cuda")
        for s in (0.0, 0.0, 0.0, 0.0, -0.0, 0.0):                  # from the third, a launcher for 0.0
            got = torch.from_numpy(_launch(torch.full((1000,), float("nan"), device="cuda"), x, y, s).numpy())
            assert (got == 0).all()
            assert torch.signbit(got).all() if math.copysign(1.0, s) < 0 else not torch.signbit(got).any(), s


def test_fresh_tensors_of_alternating_layouts_compute_right():
    # The latest direct layout is checked on the objects (LayoutPlan.direct(keyed=True)); a
    # launch of another length or of a view at another 16-byte alignment class is another
    # layout, looked up by its key. Each launch reads new memory and writes its own output.
    with ts.backend("triton"):
        g = torch.Generator(device="cuda").manual_seed(7)
        for i in range(24):
            n, off = ((1000, 0), (800, 0), (1000, 1))[i % 3]
            x, y = (torch.randn(n + off, device="cuda", generator=g)[off:] for _ in range(2))
            z = torch.full((n,), float("nan"), device="cuda")
            got = torch.from_numpy(_launch(z, x, y, 0.25 * (i % 2 + 1)).numpy())
            torch.testing.assert_close(got, (x * (0.25 * (i % 2 + 1)) + y).cpu())


def test_torch_tensors_passed_straight_in_compute_right_through_the_direct_form(started):
    # The output partitioned once; new torch views of the inputs every call (LayoutPlan.direct
    # borrows them). Each result is read back after the launch: what torch computes.
    with ts.backend("triton"):
        z = ts.from_torch(torch.zeros(1000, device="cuda"))
        for seed in range(8):
            g = torch.Generator(device="cuda").manual_seed(seed)
            x, y = (torch.randn(1000, device="cuda", generator=g) for _ in range(2))
            for s in (0.5, 0.5, 0.5, 0.5, 0.5):
                p = z.partition((256,))
                scale_add(p, x.view(1000), y.view(1000), s)
                got = p.unpartition().numpy()                      # a host read waits for the launch
                torch.testing.assert_close(torch.from_numpy(got), (x * 0.5 + y).cpu())
    assert any(started), "no launch took the direct form"


def test_a_torch_alias_of_the_output_in_a_warmed_layout_is_refused():
    with ts.backend("triton"):
        base = torch.randn(2000, device="cuda")
        p = ts.from_torch(base[:1000]).partition((256,))
        for _ in range(5):
            scale_add(p, base[1000:], base[1000:], 0.5)             # disjoint torch views: fine
        torch.cuda.synchronize()
        before = base.clone()
        with pytest.raises(ts.AliasError, match="output `z` of `scale_add` shares memory with argument `x`"):
            scale_add(p, base[500:1500], base[1000:], 0.5)
        p.unpartition()
        torch.cuda.synchronize()
        assert torch.equal(base, before)
