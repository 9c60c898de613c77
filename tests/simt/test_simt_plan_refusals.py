"""A launch plan is keyed by layout, not memory, so it must refuse exactly what the full path
refuses when only the memory changes between two launches of one layout: an output aliasing an
input (S7), a lent or handed-over tensor (S8), memory nobody wrote (S14), a borrowed torch view of
such memory (S13). Each case runs on the CPU executor's plan (`rebind`) and on the GPU's lean path
(gpu_repeat.py, device stubbed), asserts the error class, message and line, that the plan (not a
new binding) refused it, and that the full path, without the plan, refuses it alike."""
import types

import pytest
import torch
from simt_helpers import PendingEvent, assert_diagnostic
from test_simt_gpu_repeat import device  # noqa: F401  (the fixture)

import tilesafe as ts
from tilesafe.simt import gpu_launch
from tilesafe.simt import launch as simt_launch
from tilesafe.simt.examples.vector_add import vector_add

HERE = __file__
BIND = simt_launch.bind       # the real one: the fixtures count bindings through a wrapper


@pytest.fixture(params=["cpu", "gpu"])
def bound(request, monkeypatch):
    """Each path in turn; returns the list of full bindings made (a plan's launch makes none)."""
    if request.param == "gpu":
        return request.getfixturevalue("device").bound
    made = []
    real_bind = simt_launch.bind
    monkeypatch.setattr(vector_add, "plans", {})
    monkeypatch.setattr(simt_launch, "bind", lambda *a: made.append(a) or real_bind(*a))
    return made


def with_plan(bound, *args):
    """Launch `args`' layout twice (the plan, and on the GPU its lean path); returns the bindings made."""
    vector_add(*args)
    vector_add(*args)
    assert len(bound) == 1
    return len(bound)


def refused_by_plan(bound, call, marker: str, fragment: str, cls):
    """`call` is refused by the plan with `cls`, `fragment`, at `marker`'s line; then by the full path alike."""
    made = len(bound)
    with pytest.raises(cls) as ei:
        call()
    assert len(bound) == made                     # no new binding: the plan refused it
    assert_diagnostic(ei.value, HERE, marker, fragment)
    vector_add.plans.clear()                      # the full path this time, without the counting wrapper
    simt_launch.bind = BIND                       # (its frame would be the caller an error names)
    with pytest.raises(cls) as full:
        call()
    assert (full.value.message, full.value.loc, full.value.help) == (ei.value.message, ei.value.loc, ei.value.help)


def test_an_output_sharing_memory_with_an_input_in_a_known_layout(bound):
    x, y = torch.ones(64), torch.ones(64)
    with_plan(bound, torch.empty(64), x, y)
    buf = torch.ones(96)
    out, x2 = buf[:64], buf[32:]                  # the plan's layout: (64,) f32, stride 1; overlapping
    refused_by_plan(bound, lambda: vector_add(out, x2, y),  # E:alias
                    "E:alias", "output `out` of `vector_add` shares memory with argument `x`", ts.AliasError)


def test_an_output_passed_again_as_an_input_in_a_known_layout(bound):
    x, y = torch.ones(64), torch.ones(64)
    with_plan(bound, torch.empty(64), x, y)
    refused_by_plan(bound, lambda: vector_add(y, x, y),  # E:same
                    "E:same", "output `out` of `vector_add` shares memory with argument `y`", ts.AliasError)


def test_an_output_aliasing_an_input_through_another_storage_object(bound):
    y = torch.ones(64)
    with_plan(bound, torch.empty(64), torch.ones(64), y)
    x = torch.ones(64)
    out = torch.from_numpy(x.numpy())             # a second torch storage over x's memory, both new to tilesafe
    refused_by_plan(bound, lambda: vector_add(out, x, y),  # E:numpy
                    "E:numpy", "output `out` of `vector_add` shares memory with argument `x`", ts.AliasError)


def test_disjoint_views_of_one_storage_are_accepted_by_the_plan(bound):
    x, y = torch.ones(64), torch.ones(64)
    with_plan(bound, torch.empty(64), x, y)
    buf = torch.arange(128, dtype=torch.float32)
    out, x2 = buf[:64], buf[64:]                  # one memory, no shared byte: compared byte by byte
    expected = x2 + y
    vector_add(out, x2, y).sync()
    vector_add(torch.empty(64), y, y).sync()      # two inputs in one memory: nothing to compare
    assert len(bound) == 1
    (plan,) = vector_add.plans.values()
    if plan.repeat is None:                       # the CPU executor ran it (the GPU stub runs nothing)
        assert torch.equal(out, expected)


def test_a_lent_tensor_in_a_known_layout(bound):
    y = torch.ones(64)
    with_plan(bound, torch.empty(64), ts.ones(64), y)
    x = ts.ones(64)
    p = x.partition((16,))                        # new memory in the plan's layout, lent (S8)
    refused_by_plan(bound, lambda: vector_add(torch.empty(64), x, y),  # E:lent
                    "E:lent", "cannot use `x`: this tensor is lent to a partition", ts.OwnershipError)
    p.unpartition()


def test_a_handed_over_tensor_in_a_known_layout(bound):
    y = torch.ones(64)
    with_plan(bound, torch.empty(64), ts.ones(64), y)
    x = ts.ones(64)
    x.to_torch()                                  # handed to torch: the tilesafe handle is spent (S8/S13)
    refused_by_plan(bound, lambda: vector_add(torch.empty(64), x, y),  # E:handed
                    "E:handed", "cannot use `x`: this tensor was handed to torch at", ts.OwnershipError)


def test_unwritten_memory_in_a_known_layout(bound):
    y = torch.ones(64)
    with_plan(bound, torch.empty(64), ts.ones(64), y)
    x = ts.empty(64)                              # new memory nobody wrote (S14)
    refused_by_plan(bound, lambda: vector_add(torch.empty(64), x, y),  # E:unwritten
                    "E:unwritten", "argument `x` of `vector_add` is read, but it came from ts.empty", ts.OwnershipError)


def test_a_torch_view_of_unwritten_memory_in_a_known_layout(bound):
    y = torch.ones(64)
    with_plan(bound, torch.empty(64), torch.ones(64), y)
    x = ts.empty(64).to_torch()                   # tilesafe's unwritten bytes, borrowed back by torch (S13)
    refused_by_plan(bound, lambda: vector_add(torch.empty(64), x, y),  # E:borrowed
                    "E:borrowed", "argument `x` of `vector_add` is read, but it came from ts.empty",
                    ts.OwnershipError)
    x.fill_(3.0)                                  # torch wrote them: borrowed as written from now on
    out = torch.empty(64)
    vector_add(out, x, y).sync()                  # accepted
    (plan,) = vector_add.plans.values()
    if plan.repeat is None:                       # the CPU executor ran it
        assert torch.equal(out, torch.full((64,), 4.0))

def test_a_torch_write_through_a_second_storage_counts_in_a_known_layout(bound):
    y = torch.ones(64)
    with_plan(bound, torch.empty(64), torch.ones(64), y)
    handed = ts.empty(64).to_torch()              # tilesafe's unwritten bytes, handed to torch
    alias = torch.from_numpy(handed.numpy())      # a second storage over them (as DLPack makes), new to tilesafe
    alias.fill_(3.0)                              # torch wrote them through it: written, as from_torch finds (S13)
    out = torch.empty(64)
    vector_add(out, alias, y).sync()              # accepted by the plan, as by the full path
    assert len(bound) == 1
    (plan,) = vector_add.plans.values()
    if plan.repeat is None:                       # the CPU executor ran it
        assert torch.equal(out, torch.full((64,), 4.0))


def test_a_known_layout_on_another_stream_waits_for_the_writer(device, monkeypatch):
    x, y = torch.ones(64), torch.ones(64)
    with_plan(device.bound, torch.empty(64), x, y)
    monkeypatch.setattr(torch.cuda, "Event", PendingEvent)
    mid = torch.empty(64)
    vector_add(mid, x, y)                         # on stream 7, still running
    waits = []
    side = types.SimpleNamespace(cuda_stream=9, device_index=0, wait_event=waits.append)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: side)
    monkeypatch.setattr(gpu_launch, "current_stream", lambda index: 9)
    vector_add(torch.empty(64), mid, y)           # reads mid on stream 9: waits for its writer (S10)
    assert len(waits) == 1
    vector_add(torch.empty(64), x, y)             # x and y are only read on stream 7: nothing to wait for
    assert len(waits) == 1 and len(device.bound) == 1
