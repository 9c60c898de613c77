"""`kv_append`: keys/values written into a cache at a position given as an int or a device tensor."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_at_call, assert_unchanged, snapshot
from kernel_helpers import randn


def want_after(cache, x, start):
    """The oracle: the cache with rows start.. replaced by x (T, HKV, D), rows past the end dropped."""
    want = cache.clone()
    rows = min(x.shape[0], cache.shape[1] - start)
    want[:, start:start + rows] = x[:rows].transpose(0, 1)
    return want


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("d", [16, 24])
@pytest.mark.parametrize("start", ["int", "i32", "i64"])
def test_append_writes_only_its_rows(backend, device, dtype, d, start):
    cache = randn((2, 12, d), dtype, 1, device)                   # (HKV, max_seq, D), other rows must stay
    x = randn((3, 2, d), dtype, 2, device)                        # (T, HKV, D)
    at = 5 if start == "int" else torch.tensor([5], dtype=getattr(torch, "int32" if start == "i32" else "int64"),
                                               device=device)
    want = want_after(cache, x, 5)
    assert tk.kv_append(cache, x, at) is cache
    assert torch.equal(cache.cpu(), want.cpu())


def test_rows_past_the_cache_are_dropped(backend, device):
    cache = randn((1, 6, 8), "f32", 3, device)
    x = randn((4, 1, 8), "f32", 4, device)
    want = want_after(cache, x, 4)                                # rows 4, 5 written; 6, 7 dropped
    tk.kv_append(cache, x, torch.tensor([4], dtype=torch.int32, device=device))
    assert torch.equal(cache.cpu(), want.cpu())


def test_a_strided_slot_of_a_larger_cache(backend, device):
    """An engine's cache is (slots, HKV, L, D): a slot's view is written, the other slots are not."""
    caches = randn((3, 2, 8, 16), "f32", 5, device)
    x = randn((1, 2, 16), "f32", 6, device)
    want = caches.clone()
    want[1] = want_after(caches[1], x, 7)
    tk.kv_append(caches[1], x, torch.tensor([7], dtype=torch.int32, device=device))
    assert torch.equal(caches.cpu(), want.cpu())


def test_bad_arguments_are_refused_before_writing():
    cache, x = torch.zeros(2, 8, 16), torch.ones(1, 2, 16)
    before = snapshot(cache)
    with pytest.raises(ts.LaunchError) as e:
        tk.kv_append(cache, torch.ones(1, 3, 16), 0)  # kv: heads
    assert_at_call(e.value, __file__, "kv: heads", "needs cache (HKV, max_seq, D) and x (T, HKV, D)")
    with pytest.raises(ts.LaunchError) as e:
        tk.kv_append(cache, x, 8)  # kv: start
    assert_at_call(e.value, __file__, "kv: start", "start 8 must be in 0..7")
    with pytest.raises(ts.LaunchError) as e:
        tk.kv_append(cache, x, torch.tensor([1.0]))  # kv: float start
    assert_at_call(e.value, __file__, "kv: float start", "`start` has dtype f32")
    with pytest.raises(ts.AliasError) as e:
        tk.kv_append(cache, cache[:, :1].transpose(0, 1), 3)  # kv: alias
    assert e.value.loc.line > 0 and "share" in e.value.message
    assert_unchanged(before, cache)
