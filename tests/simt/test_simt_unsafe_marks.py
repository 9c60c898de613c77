"""S14 for an unsafe kernel's writes at computed indices on the GPU path: the kernel sets a byte
per element it wrote in the target's write mask, and the elements count as written when the
launch is synced. Run here with the device stubbed (CPU tensors take the GPU branch; the stubbed
launch sets the mask bytes the GPU kernel would); tests marked gpu run the real kernel."""
import types

import pytest
import torch

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt import gpu_launch
from tilesafe.simt.examples.vector_add import vector_add

C64 = simt.Contract(block=(64,))


@simt.kernel(contract=C64, unsafe=True)
def scatter(out: simt.Disjoint[ts.f32, ("N",)], idx: simt.Ref[ts.i32, ("M",)], M: int, N: int):
    i = simt.global_id()
    if i < M:
        out[idx[i]] = i * 1.0


@pytest.fixture
def device(monkeypatch, stubbed_gpu):
    """The device stubbed; a launch of `scatter` sets the mask bytes of the indices it is given."""
    launched = []

    def launch(compiled, config, handle, args):
        launched.append(compiled)
        if compiled == "scatter":
            plan = next(p for p in scatter.plans.values() if p.args is args)
            plan.masks["out"][current["idx"].long()] = 1     # as the kernel's __stw1 would
    current = {}
    monkeypatch.setattr(gpu_launch, "launch", launch)
    for k, name in ((scatter, "scatter"), (vector_add, "vector_add")):
        monkeypatch.setattr(k, "gpu_compiled", lambda bound, index, name=name: name, raising=False)
        monkeypatch.setattr(k, "error_flag", lambda index: torch.zeros(1, dtype=torch.int32), raising=False)
        monkeypatch.setattr(k, "plans", {})
    return types.SimpleNamespace(launched=launched, current=current)


def run_scatter(device, out, idx):
    device.current["idx"] = idx
    return scatter.unsafe_launch(out, idx, grid=(1,))


def test_what_an_unsafe_kernel_wrote_counts_as_written_once_synced(device):
    out = ts.empty(5)
    f = run_scatter(device, out, torch.tensor([4, 0, 3, 1, 2], dtype=torch.int32))
    assert out._state.init_mask is not None              # not before the sync: the GPU may not have run
    f.sync()
    assert out._state.init_mask is None                  # every element was written
    vector_add(torch.empty(5), out, torch.ones(5))       # so it may be read (S14)


def test_a_partial_scatter_marks_only_what_it_wrote(device):
    out = ts.empty(5)
    for _ in range(2):                                   # the first launch, then the lean repeated one
        run_scatter(device, out, torch.tensor([0, 2], dtype=torch.int32)).sync()
        assert out._state.written_elements(out._torch()).tolist() == [True, False, True, False, False]
        with pytest.raises(ts.OwnershipError, match="argument `x` of `vector_add` is read"):
            vector_add(torch.empty(5), out, torch.ones(5))
    run_scatter(device, out, torch.tensor([1, 3, 4], dtype=torch.int32)).sync()   # the rest, on the lean path
    assert out._state.init_mask is None
    assert device.launched.count("scatter") == 3


def test_launches_of_one_layout_into_different_memory_keep_their_own_masks(device):
    a, b = ts.empty(5), ts.empty(5)                      # one layout (the plan's), two memories
    run_scatter(device, a, torch.tensor([4, 4], dtype=torch.int32)).sync()     # the plan, its masks
    fa = run_scatter(device, a, torch.tensor([0, 2], dtype=torch.int32))
    fb = run_scatter(device, b, torch.tensor([1, 3], dtype=torch.int32))    # in flight with a's launch
    fa.sync()
    fb.sync()
    assert a._state.written_elements(a._torch()).tolist() == [True, False, True, False, True]
    assert b._state.written_elements(b._torch()).tolist() == [False, True, False, True, False]
    assert len(scatter.plans) == 1


def test_a_torch_output_needs_no_mask_work(device):
    out = torch.zeros(5)                                 # torch made its bytes: written already
    f = run_scatter(device, out, torch.tensor([1], dtype=torch.int32))
    assert f._marks == [] and f.sync() is out


@pytest.mark.gpu
def test_gpu_an_unsafe_scatter_into_ts_empty_counts_once_synced():
    n = 10_000
    out = ts.empty(n, device="cuda")
    perm = torch.randperm(n, device="cuda").int()
    half = perm[: n // 2]
    scatter.unsafe_launch(out, half, grid=(-(-(n // 2) // 64),)).sync()
    written = out._state.written_elements(out._torch())
    assert written[half.long().cpu()].all() and int(written.sum()) == n // 2
    with pytest.raises(ts.OwnershipError):
        vector_add(torch.empty(n, device="cuda"), out, torch.ones(n, device="cuda"))
    scatter.unsafe_launch(out, perm[n // 2:], grid=(-(-(n // 2) // 64),)).sync()
    assert out._state.init_mask is None
    res = torch.empty(n, device="cuda")
    vector_add(res, out, torch.zeros(n, device="cuda")).sync()
    want = torch.empty(n, device="cuda")
    want[perm[: n // 2].long()] = torch.arange(n // 2, device="cuda", dtype=torch.float32)
    want[perm[n // 2:].long()] = torch.arange(n - n // 2, device="cuda", dtype=torch.float32)
    assert torch.equal(res, want)
