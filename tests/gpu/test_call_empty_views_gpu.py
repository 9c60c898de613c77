"""Empty views through a library call's fast form on the GPU: decode_attention over empty views
of K/V caches launches its kernels; from the third call they take the GPU form and register
the views' bytes where the full path does (an empty view's `data_ptr()` is 0: its place is
its storage's address plus its offset). Run with `pytest -m gpu`."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.runtime import planned_launch
from tilesafe.runtime.aliasing import byte_set
from tilesafe.runtime.storage_state import StorageState

pytestmark = pytest.mark.gpu


def test_empty_cache_views_take_the_gpu_form_at_their_own_bytes():
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(8, 128, generator=g, device="cuda").to(torch.bfloat16)
    kc, vc = (torch.randn(2, 64, 128, generator=g, device="cuda").to(torch.bfloat16) for _ in range(2))
    n = torch.tensor([0], device="cuda", dtype=torch.int32)
    with ts.backend("triton"), torch.no_grad():
        first = tk.decode_attention(q, kc[:, 4:4], vc[:, 4:4], n).clone()
        for _ in range(4):                                          # redo, then the fast form
            k, v = kc[:, 4:4], vc[:, 4:4]                           # new empty views, 4 rows in
            got = tk.decode_attention(q, k, v, n)
            for view, cache in ((k, kc), (v, vc)):
                registered = [p.byteset for p in StorageState.of(cache)._pending]
                assert byte_set(view) in registered
                assert all(bs.offset >= 0 for bs in registered), registered
        torch.cuda.synchronize()
    torch.testing.assert_close(got, first, equal_nan=True)
    fast = [launch for plan in tk.decode_attention.plans.plans.values() if plan.hit
            for launch in plan.hit.launches if launch is not None and launch.mode == planned_launch._GPU]
    assert fast, "no launch took the GPU form"
