"""An eager library call's new result on the written-out fast form (kernels/call_hits_unrolled.py):
torch.empty_strided with the layout's size and dense strides, its bytes a constant of the layout.
The result is what torch.empty gives (same shape, strides, dtype, device), its state covers
exactly its storage's bytes, and another storage object over those bytes (a DLPack alias) finds
that state, so the hand-over rules see the result as they would a fresh call's."""
import torch

import tilesafe.kernels as tk
from tilesafe.runtime.spec import dense_strides
from tilesafe.runtime.storage_state import StorageState


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def test_dense_strides_are_torch_empty_s():
    for shape in [(1, 6144), (2, 0, 3), (5,), (), (3, 1, 4), (0,)]:
        assert dense_strides(shape) == torch.empty(shape).stride()


def test_the_written_out_result_is_torch_empty_s_layout_and_its_state_covers_its_bytes(device):
    x, w = _rand((3, 40), 1).to(device), _rand((40,), 2).to(device)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    tk.rms_norm.plans.plans.clear()
    results = [tk.rms_norm(x.view(3, 40), w.view(40)) for _ in range(5)]   # record, redo, the fast form
    hits = [p.hit for p in tk.rms_norm.plans.plans.values() if p.hit is not None]
    assert hits and hits[0].unrolled is not None                           # the written-out form ran
    ref = torch.empty(3, 40, device=device)
    for z in results[2:]:
        assert (z.shape, z.stride(), z.dtype, z.device) == (ref.shape, ref.stride(), ref.dtype, ref.device)
        torch.testing.assert_close(z, want, rtol=2e-4, atol=2e-5)
        storage = z.untyped_storage()
        state = StorageState.of(z)
        assert (state.base, state.nbytes) == (storage.data_ptr(), storage.nbytes())
        alias = torch.from_dlpack(z.__dlpack__())                          # another storage object, same bytes
        assert alias.untyped_storage() is not storage
        assert StorageState.of(alias).__dict__ is state.__dict__          # found through the memory map
    tk.rms_norm.plans.plans.clear()
