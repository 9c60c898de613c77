"""A call whose launches pass results through the device's scratch (kernels/scratch.py: split-K
partial products, a long softmax row's statistics) takes its plan's written-out hit
(kernels/call_hits_unrolled.py) as one-launch calls do: from the layout's third call CallHit's
loops never run, each call computes its own result, and the scratch root is taken again only
while this thread's buffer is the one it was made in (a buffer replaced by a larger one is
used from then on). What the hit trusts of the caller's tensors is read on every call: lent,
unwritten or aliased memory in the same layout is refused as a fresh call refuses it, and
memory torch has written since (its version counter) is accepted."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_unchanged, refused_twice, snapshot
from tilesafe.kernels import call_recording as R
from tilesafe.kernels import configs, scratch
from tilesafe.kernels.call_hits import CallHit

HERE = __file__


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 4 - 2


@pytest.fixture
def split_k(monkeypatch):
    """matmul's CPU default splits K three ways: two launches through the scratch."""
    monkeypatch.setitem(configs.CPU_DEFAULTS, "matmul", dict(configs.CPU_DEFAULTS["matmul"], split_k=3))
    tk.matmul.plans.plans.clear()
    yield
    tk.matmul.plans.plans.clear()


@pytest.fixture
def fresh_plans():
    tk.softmax.plans.plans.clear()
    yield
    tk.softmax.plans.plans.clear()


@pytest.fixture
def walked(monkeypatch):
    """Calls of CallHit's loops (the written-out hit's fallback)."""
    seen = []
    real_walk = CallHit._walk
    monkeypatch.setattr(CallHit, "_walk", lambda self, places: seen.append(1) or real_walk(self, places))
    tk.softmax.plans.plans.clear()
    yield seen
    tk.softmax.plans.plans.clear()


# name -> (input shapes, call(inputs, out or None), oracle): two launches each (a row of 2048 is
# past the CPU defaults' row_max of 1024; 20 rows take the tiled product, split three ways)
_CALLS = {
    "softmax": ([(2, 2048)], lambda x, out: tk.softmax(x, out=out), lambda x: torch.softmax(x, -1)),
    "matmul split-K": ([(20, 256), (256, 24)], lambda a, b, out: tk.matmul(a, b, out=out), lambda a, b: a @ b),
}


def _hit(fn):
    (plan,) = fn.plans.plans.values()
    return plan.hit


@pytest.mark.parametrize("given_out", [False, True])
@pytest.mark.parametrize("case", list(_CALLS))
def test_a_call_through_the_scratch_takes_the_written_out_hit(split_k, walked, case, given_out):
    shapes, call, oracle = _CALLS[case]
    fn = tk.softmax if case == "softmax" else tk.matmul
    with ts.backend("reference"):
        tensors = [_rand(s, j) for j, s in enumerate(shapes)]
        out = torch.zeros(oracle(*tensors).shape) if given_out else None
        for t in tensors + [out] * given_out:
            ts.from_torch(t)                                                 # known memory
        for i in range(6):
            for j, t in enumerate(tensors):
                t.copy_(_rand(t.shape, 10 * i + j))                          # each call's own values
            want = oracle(*tensors)
            if given_out:
                out.fill_(float("nan"))                                      # poisoned: written by the call
            walked.clear()
            got = call(*tensors, out)
            assert got is out if given_out else got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)
            if i >= 3:
                hit = _hit(fn)
                assert sum(type(s) is not tuple for s in hit.plan.steps) == 2
                assert any(kind == R.SCRATCH for kind, _ in hit.plan.roots)
                assert hit.unrolled is not None and walked == []             # the written-out hit alone


def test_a_replaced_scratch_buffer_is_the_one_the_next_call_uses(walked):
    with ts.backend("reference"):
        x = _rand((2, 2048), 0)
        ts.from_torch(x)                                                     # known memory
        for _ in range(4):
            tk.softmax(x)
        hit = _hit(tk.softmax)
        (i,) = [i for i, (kind, _) in enumerate(hit.plan.roots) if kind == R.SCRATCH]
        device = hit.plan.roots[i][1]
        old = scratch.buffers()[device]
        assert hit.seen[i][0]() is old
        kept = old._t.clone()
        new = scratch.buffers()[device] = ts.zeros((old.numel + 4096,), ts.f32, device)   # as a larger call grows it
        x.copy_(_rand((2, 2048), 9))
        torch.testing.assert_close(tk.softmax(x), torch.softmax(x, -1), rtol=2e-5, atol=2e-5)
        assert walked == [] and hit.seen[i][0]() is new
        assert torch.equal(old._t, kept) and new._t.abs().sum() > 0    # the statistics went to the new buffer
        del old, new
        scratch.buffers().clear()              # no buffer for the device (a new thread's case), the last one dead
        assert i not in hit.seen               # its root forgotten with it: the plan keeps no dead buffer's memory
        x.copy_(_rand((2, 2048), 10))
        torch.testing.assert_close(tk.softmax(x), torch.softmax(x, -1), rtol=2e-5, atol=2e-5)
        made = scratch.buffers()[device]
        assert walked == [] and hit.seen[i][0]() is made                 # made by the call, and used


def _warm():
    for seed in range(3):
        tk.softmax(_rand((2, 2048), seed), out=torch.zeros(2, 2048))
    assert _hit(tk.softmax).unrolled is not None


def test_a_lent_out_in_the_same_layout_is_refused(fresh_plans):
    with ts.backend("reference"):
        _warm()
        x, out = _rand((2, 2048), 5), torch.full((2, 2048), 7.0)
        lent = ts.from_torch(out).partition((1, 2048))
        before = snapshot(out)
        message = refused_twice(lambda: tk.softmax(x, out=out), ts.OwnershipError, HERE,  # scratch-lent
                                "scratch-lent", tk.softmax)
        assert "lent" in message
        assert_unchanged(before, out)
        lent.unpartition()


def test_unwritten_memory_is_refused_until_torch_writes_it(fresh_plans):
    with ts.backend("reference"):
        _warm()
        x = ts.empty((2, 2048)).to_torch()
        out = torch.zeros(2, 2048)
        message = refused_twice(lambda: tk.softmax(x, out=out), ts.OwnershipError, HERE,  # scratch-unwritten
                                "scratch-unwritten", tk.softmax)
        assert "came from ts.empty and has not been written" in message
        _warm()
        x.copy_(_rand((2, 2048), 6))                   # torch writes it: its version counter moves
        torch.testing.assert_close(tk.softmax(x, out=out), torch.softmax(x, -1), rtol=2e-5, atol=2e-5)


def test_an_out_over_x_through_another_storage_is_refused(fresh_plans):
    """The warm layout (x and out in storages of their own), but both storages are known views
    of the same bytes (one merged state): the hit is not apart, the whole-call check refuses."""
    with ts.backend("reference"):
        _warm()
        base = _rand((2 * 2048 + 1024,), 9)
        x = base[:2 * 2048].view(2, 2048)
        out = torch.from_numpy(base.numpy()[1024:]).view(2, 2048)   # another storage, over x's second half
        ts.from_torch(x), ts.from_torch(out)
        before = snapshot(base)
        message = refused_twice(lambda: tk.softmax(x, out=out), ts.AliasError, HERE,  # scratch-alias
                                "scratch-alias", tk.softmax)
        assert message == "softmax: `out` shares memory with the input `x`"
        assert_unchanged(before, base)
