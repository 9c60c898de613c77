"""The layout cache builds a launch's key once: a launch of a new layout misses, the full path
checks it and remembers its verdicts under the key the miss built (the same live objects)."""
import torch

import tilesafe as ts
from tilesafe.runtime import launch_cache


@ts.kernel
def scale(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], s: float, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s)


def test_a_new_layout_builds_its_key_once_and_the_next_launch_finds_it(backend, monkeypatch, binds):
    parts = [0]
    real = launch_cache._layout_key

    def counting(backend, grid, form, values):
        parts[0] += len(values)          # the facts of each argument, once per key built
        return real(backend, grid, form, values)
    monkeypatch.setattr(launch_cache, "_layout_key", counting)
    x = torch.arange(8, dtype=torch.float32)
    for n in range(2):
        z = ts.empty(8)
        scale(z.partition((4,)), ts.from_torch(x), 2.0).sync()
        torch.testing.assert_close(z.to_torch(), x * 2)
        if n == 0:
            assert parts[0] == 3 and binds[0] == 1                # the miss built it; remember took it
    assert parts[0] == 6 and binds[0] == 1                        # the second launch: found by its key


@ts.kernel(preconditions=["k >= 1"])
def times(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], k: int, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * k)


def test_a_kept_entry_skips_the_scalar_checks_only_for_the_scalars_it_was_found_with(backend):
    """A library call plan launches on a kept entry (Kernel.launch_entry): the preconditions
    and bounds conditions of its runtime scalars are skipped only for the very values the
    entry's launch had; another value is checked, and refused as a first launch would be."""
    import pytest
    x = torch.arange(8, dtype=torch.float32)

    def kwargs(z, k):
        return dict(z=ts.from_torch(z).partition((4,)), x=ts.from_torch(x), k=k)
    z = torch.zeros(8)
    first = kwargs(z, 3)
    times(**first).sync()
    entry = times.cached_entry(first)
    assert entry is not None
    for k in (3, 3):
        z = torch.zeros(8)
        times.launch_entry(entry, kwargs(z, k)).sync()
        torch.testing.assert_close(z, x * k)
    z = torch.full((8,), 9.0)
    with pytest.raises(ts.LaunchError) as e:
        times.launch_entry(entry, kwargs(z, 0))
    assert e.value.message == "precondition `k >= 1` of `times` does not hold (k = 0)"
    assert (z == 9.0).all()
