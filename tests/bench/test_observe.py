"""bench.observe.Observer sees a launch even when the launch path hands back the same
Launched record it gave the launch before (a layout's GPU fast path does: one record per
layout, not one per launch), and leaves a kernel it did not see launched as it was."""
import tilesafe as ts
from tilesafe.bench.observe import Observer


@ts.kernel
def copy_k(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


def _launch():
    x = ts.tensor([1.0, 2.0, 3.0, 4.0])
    z = ts.zeros(4)
    copy_k(z.partition((4,)), x).sync()


def test_a_launch_that_sets_the_same_record_again_is_seen():
    with ts.backend("reference"):
        _launch()
        record = copy_k.last_launch
        with Observer([copy_k]) as seen:
            copy_k.last_launch = record          # what the GPU fast path does on each launch
        assert "copy_k" in seen and seen["copy_k"].kernel == "copy_k"


def test_a_kernel_not_launched_is_not_seen_and_keeps_its_record():
    with ts.backend("reference"):
        _launch()
        record = copy_k.last_launch
        with Observer([copy_k]) as seen:
            pass
        assert seen == {} and copy_k.last_launch is record


def test_a_real_launch_is_seen():
    with ts.backend("reference"):
        with Observer([copy_k]) as seen:
            _launch()
        assert seen["copy_k"].consts["B"] == 4
