"""Empty views through library call plans: torch gives an empty view's `data_ptr()` as 0, so
a plan that placed tensors by it put an empty view at a garbage distance from another view
of its storage (the redo then built an out-of-bounds view: an internal RuntimeError), and a
fast launch registered its bytes at a negative offset. Plans place every view by its first
element's address (its storage's address plus its offset)."""
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.runtime import future
from tilesafe.runtime.aliasing import byte_set
from tilesafe.runtime.storage_state import StorageState


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def test_an_empty_view_sharing_a_storage_with_another_argument_is_planned_right(backend):
    """Rows 1:1 of a matrix and its row 0 as the weight: every call of the layout (record, redo,
    fast form) returns the empty result, and `out=` stays untouched."""
    big = _rand((4, 32), 1)
    for _ in range(4):
        y = tk.rms_norm(big[1:1], big[0])
        assert y.shape == (0, 32)
        out = torch.full((4, 32), 7.0)
        y = tk.add(big[3:3], big[0:0], out=out[2:2])
        assert y.shape == (0, 32) and bool((out == 7.0).all())


def test_an_empty_cache_view_is_registered_at_its_own_bytes_by_a_fast_launch(monkeypatch, counted,
                                                                            gpu_form_launching_nothing,
                                                                            stand_in_stream):
    """decode_attention over empty views of K/V caches (no cached tokens yet) launches its
    kernels; on the GPU form (stand-ins for the stream and Triton's launcher) each launch
    registers the views' byte sets exactly as the full path makes them (runtime.aliasing.
    byte_set: the storage offset), not at a negative offset from a 0 address."""
    monkeypatch.setattr(future.HOLDING, "add", lambda completion: completion._finish())
    tk.decode_attention.plans.plans.clear()                      # plans made here, with the stand-ins
    with ts.backend("reference"):
        q, kc, vc = _rand((4, 16), 1), _rand((2, 8, 16), 2), _rand((2, 8, 16), 3)
        n = torch.tensor([0], dtype=torch.int32)
        for _ in range(4):
            k, v = kc[:, 2:2], vc[:, 2:2]                         # empty, 2 rows into the cache
            tk.decode_attention(q, k, v, n)
            if not counted[1]:
                continue
            for view, cache in ((k, kc), (v, vc)):
                registered = [p.byteset for p in StorageState.of(cache)._pending]
                assert byte_set(view) in registered, registered
                assert all(bs.offset >= 0 for bs in registered)
    assert counted[1] >= 2                                       # the fast form ran (calls 3 and 4)
    tk.decode_attention.plans.plans.clear()                      # no later test meets a stand-in's plan
