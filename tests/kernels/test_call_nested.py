"""A library call whose full path makes other library calls (a fused call above 16 rows runs
its unfused form: `linear(rms_norm(x, g), w)`) records them as steps of its own plan: from
the second call of a layout the fused call redoes the record without running either inner
function, computes what torch computes, and refuses what a first call refuses when only a
memory fact changes (bytes lent through another handle, unwritten memory) — class, message,
the line of the call, nothing written. First-use tuning runs stay out of plans
(test_call_plans.py)."""
import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_located, assert_unchanged, marker_line, snapshot
from tilesafe.kernels import linear_fusions

HERE = __file__
M = 20                                                            # above the 16 rows of the fused GEMV


DEV = {"dev": "cpu"}                                              # where the backend's tensors live


@pytest.fixture(autouse=True)
def _on_device(device):
    DEV["dev"] = device


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 2 - 1).to(DEV["dev"])


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.fixture
def inner(monkeypatch):
    """[runs of rms_norm, silu_mul and linear made by the fused functions' full paths]."""
    count = [0]
    for name in ("rms_norm", "silu_mul", "linear"):
        real = getattr(linear_fusions, name)
        monkeypatch.setattr(linear_fusions, name, lambda *a, real=real, **k: (count.__setitem__(0, count[0] + 1),
                                                                              real(*a, **k))[1])
    return count


def test_a_fused_call_above_16_rows_keeps_a_plan_of_its_unfused_form(backend, inner):
    nw, w = _rand((32,), 1), _rand((24, 32), 2)
    tk.rms_norm_linear.plans.plans.clear()
    for seed in range(5):                                          # records, redoes, then its fast form
        x, out = _rand((M, 32), 10 + seed), torch.full((M, 24), float("nan"), device=DEV["dev"])
        eager = tk.rms_norm_linear(x, nw, w)
        got = tk.rms_norm_linear(x, nw, w, out=out)
        assert got is out
        for y in (eager, got):
            torch.testing.assert_close(y, F.linear(_rms(x, nw), w), rtol=1e-4, atol=1e-5)
    assert inner[0] == 2 * 2                                       # the first call of each form only
    plans = tk.rms_norm_linear.plans.plans.values()
    assert len(plans) == 2 and all(plan.hit for plan in plans)   # eager and out=, each with its fast form


def test_silu_mul_linear_with_a_residual_above_16_rows_keeps_a_plan(backend, inner):
    w = _rand((24, 32), 3)
    tk.silu_mul_linear.plans.plans.clear()
    for seed in range(4):
        gu, r = _rand((M, 64), 20 + seed), _rand((M, 24), 30 + seed)
        got = tk.silu_mul_linear(gu, w, residual=r)
        torch.testing.assert_close(got, F.linear(F.silu(gu[:, :32]) * gu[:, 32:], w) + r, rtol=1e-4, atol=1e-5)
        if seed == 0:
            first = inner[0]                                       # silu_mul, linear (and its residual form)
    assert first > 0 and inner[0] == first                         # none after the first call
    plans = tk.silu_mul_linear.plans.plans.values()
    assert len(plans) == 1 and all(plan.hit for plan in plans)   # one form, with its fast form


def test_an_out_lent_through_another_handle_is_refused_as_a_first_call_is(backend):
    nw, w, x = _rand((32,), 1), _rand((24, 32), 2), _rand((M, 32), 3)
    for _ in range(3):
        tk.rms_norm_linear(x, nw, w, out=torch.zeros(M, 24, device=DEV["dev"]))
    out = torch.full((M, 24), 7.0, device=DEV["dev"])
    lent = ts.from_torch(out).partition((4, 8))  # nested-lent-here
    before = snapshot(x, nw, w)
    with pytest.raises(ts.OwnershipError) as e:
        tk.rms_norm_linear(x, nw, w, out=out)  # nested-lent-call
    assert e.value.message.startswith("cannot ") and "lent to a partition" in e.value.message
    assert f"{HERE}:{marker_line(HERE, 'nested-lent-here')}" in e.value.message
    assert_located(e.value, HERE, "nested-lent-call")
    assert (out == 7.0).all()
    assert_unchanged(before, x, nw, w)
    lent.unpartition()
    torch.testing.assert_close(tk.rms_norm_linear(x, nw, w, out=out), F.linear(_rms(x, nw), w),
                               rtol=1e-4, atol=1e-5)


def test_unwritten_memory_handed_to_torch_is_refused_as_a_first_call_is(backend):
    nw, w = _rand((32,), 1), _rand((24, 32), 2)
    for seed in range(3):
        tk.rms_norm_linear(_rand((M, 32), seed), nw, w)
    handed = ts.empty((M, 32)).to_torch()                          # unwritten, handed to torch
    with pytest.raises(ts.OwnershipError) as e:
        tk.rms_norm_linear(handed, nw, w)  # nested-unwritten
    assert "came from ts.empty and has not been written" in e.value.message
    assert_located(e.value, HERE, "nested-unwritten")
    handed.fill_(0.5)                                              # torch writes it: its counter moves
    torch.testing.assert_close(tk.rms_norm_linear(handed, nw, w), F.linear(_rms(handed, nw), w),
                               rtol=1e-4, atol=1e-5)
