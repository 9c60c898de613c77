"""The lean repeated GPU launch (gpu_repeat.py), run on this CPU: CPU tensors take the GPU branch
with the compile, the stream and the final driver launch stubbed, so what runs is the host
path only. The first launch of a layout binds and checks everything and prepares the lean path;
later launches take it and must still check what can change (S8, S13, S14) and leave the same
bookkeeping. tests/gpu/test_simt_gpu.py runs the same path on the GPU."""
import types

import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe.simt import gpu_launch
from tilesafe.simt import launch as simt_launch
from tilesafe.simt.examples.histogram import histogram
from tilesafe.simt.examples.vector_add import vector_add


@pytest.fixture
def device(monkeypatch, stubbed_gpu):
    """The device stubbed out; returns the launches the GPU would have run and the bindings made."""
    launched = []
    monkeypatch.setattr(gpu_launch, "config", lambda grid, block, shared=0: (grid, block))
    # each launch: (config, the parameter array, its values then: a later launch rewrites the pointers)
    monkeypatch.setattr(gpu_launch, "launch", lambda kernel, config, handle, args: launched.append(
        (config, args, [v.value for v in args.values])))
    for k in (vector_add, histogram):
        monkeypatch.setattr(k, "gpu_compiled", lambda bound, index: "compiled", raising=False)
        monkeypatch.setattr(k, "error_flag", lambda index: torch.zeros(1, dtype=torch.int32), raising=False)
        monkeypatch.setattr(k, "plans", {})
    bound = []
    real_bind = simt_launch.bind
    monkeypatch.setattr(simt_launch, "bind", lambda *a: bound.append(a) or real_bind(*a))
    return types.SimpleNamespace(launched=launched, bound=bound)


def test_a_repeated_launch_takes_the_lean_path_with_fresh_torch_tensors(device):
    buf = np.zeros(100, dtype=np.float32)
    x, y = torch.ones(100), torch.ones(100)
    outs = [torch.from_numpy(buf) for _ in range(3)]    # fresh tensors and storages at one address
    outs += [torch.empty(100), torch.empty(100)]         # and at new addresses: the same layout
    futures = [vector_add(out, x, y) for out in outs]
    assert len(device.bound) == 1                       # bound and checked once
    assert len(device.launched) == 5
    assert all(args is device.launched[0][1] for _, args, _ in device.launched)   # marshalled once
    # each launch passed its own tensors' addresses (numba's array ABI: data is field 4 of each array)
    assert [values[4] for _, _, values in device.launched] == [out.data_ptr() for out in outs]
    assert all(values[11] == x.data_ptr() and values[18] == y.data_ptr() for _, _, values in device.launched)
    assert device.launched[0][0] == ((1, 1, 1), (256, 1, 1))
    for out, f in zip(outs, futures):
        assert f.results() is out                       # each launch returns the output it was given
    plan = next(iter(vector_add.plans.values()))
    assert plan.repeat is not None


def test_a_launch_with_another_layout_is_bound_again(device):
    x, y = torch.ones(100), torch.ones(100)
    vector_add(torch.empty(100), x, y)
    vector_add(torch.empty(100), x, y[:50].repeat(2))   # another address: the same plan
    assert len(device.bound) == 1 and len(vector_add.plans) == 1
    vector_add(torch.empty(100, 2)[:, 0], x, y)          # another stride
    with pytest.raises(ts.LaunchError, match="has dtype f64, but the kernel declares f32"):
        vector_add(torch.empty(100, dtype=torch.float64), x, y)   # another dtype: bound, and refused
    assert len(device.bound) == 3 and len(vector_add.plans) == 2


def test_the_lean_path_still_refuses_a_lent_tensor(device):
    x, y, out = ts.ones(64), torch.ones(64), torch.empty(64)
    vector_add(out, x, y)
    vector_add(out, x, y)
    p = x.partition((16,))                              # the same layout, but x is lent now (S8)
    with pytest.raises(ts.OwnershipError, match="cannot use `x`: this tensor is lent to a partition"):
        vector_add(out, x, y)
    p.unpartition()
    vector_add(out, x, y)
    assert len(device.bound) == 1 and len(device.launched) == 3


def test_the_lean_path_marks_outputs_written_and_records_the_launch(device):
    x, y = torch.ones(64), torch.ones(64)
    out = ts.empty(64)
    vector_add(out, x, y)                               # the first launch: S14 marks `out` written
    assert out._state.init_mask is None
    out._state.init_mask = torch.zeros(out._state.nbytes, dtype=torch.bool)   # as if freshly allocated
    f = vector_add(out, x, y)
    assert len(device.bound) == 1
    assert out._state.init_mask is None                 # marked again by the lean path: every element is covered
    assert any(p.future is f._future.completion and p.is_write for p in out._state._pending)   # S9/S10
    x_state = ts.from_torch(x)._state
    assert any(p.future is f._future.completion and not p.is_write for p in x_state._pending)


def test_the_lean_path_refuses_reading_what_was_not_written(device):
    hist = torch.zeros(4, dtype=torch.int32)
    data = ts.from_torch(torch.tensor([0, 1, 2, 3], dtype=torch.int32))
    histogram.launch(hist, data, grid=(1,))
    data._state.init_mask = torch.zeros(data._state.nbytes, dtype=torch.bool)   # as if freshly allocated
    with pytest.raises(ts.OwnershipError, match="argument `x` of `histogram` is read, but it came from ts.empty"):
        histogram.launch(hist, data, grid=(1,))
    assert len(device.bound) == 1 and len(device.launched) == 1


def test_the_lean_path_finds_tensors_passed_by_keyword(device):
    x, y, out = ts.ones(64), torch.ones(64), torch.empty(64)
    for _ in range(2):
        assert vector_add(out, y=y, x=x).results() is out
        assert vector_add(x=x, out=out, y=y).results() is out
    p = x.partition((16,))                              # the keyword tensor is checked on the lean path too
    with pytest.raises(ts.OwnershipError, match="cannot use `x`"):
        vector_add(out, y=y, x=x)
    p.unpartition()
    assert len(device.bound) == 2 and len(device.launched) == 4


# -- on the GPU (pytest -m gpu) ---------------------------------------------------------------------

def _cuda_sets(count: int, n: int):
    """`count` sets of (poisoned out, x, y) on the GPU, each at its own addresses."""
    return [(torch.full((n,), float("nan"), device="cuda"), torch.randn(n, device="cuda"),
             torch.randn(n, device="cuda")) for _ in range(count)]


@pytest.mark.gpu
def test_gpu_fresh_tensors_at_new_addresses_take_one_plan_and_each_launch_writes_its_own():
    vector_add.plans.clear()
    sets = _cuda_sets(6, (1 << 16) + 3)
    futures = [vector_add(out, x, y) for out, x, y in sets]     # all in flight: each with its own pointers
    for f, (out, x, y) in zip(futures, sets):
        assert f.sync() is out
        assert torch.equal(out, x + y)
    assert len(vector_add.plans) == 1


@pytest.mark.gpu
def test_gpu_the_plan_refuses_an_output_sharing_memory_with_an_input():
    vector_add.plans.clear()
    y = torch.ones(64, device="cuda")
    for _ in range(2):
        vector_add(torch.empty(64, device="cuda"), torch.ones(64, device="cuda"), y).sync()
    buf = torch.ones(128, device="cuda")
    with pytest.raises(ts.AliasError, match="output `out` of `vector_add` shares memory with argument `x`"):
        vector_add(buf[:64], buf[32:96], y)
    out = buf[:64]
    vector_add(out, buf[64:], y).sync()                          # one storage, no shared byte: accepted
    assert torch.equal(out, torch.full((64,), 2.0, device="cuda"))
    assert len(vector_add.plans) == 1
