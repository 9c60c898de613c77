"""Reductions and softmax take torch's `dim=` as well as NumPy's `axis=` (one argument under
two names: both at once is refused), over any axis, against torch in float64."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_at_call
from kernel_helpers import assert_close, f64, poisoned, randn

REDUCE = {"sum": (tk.sum, lambda x, d: x.sum(d)), "max": (tk.max, lambda x, d: x.amax(d)),
          "mean": (tk.mean, lambda x, d: x.mean(d))}


@pytest.mark.parametrize("op", list(REDUCE))
def test_reductions_over_dim(backend, device, op):
    fn, oracle = REDUCE[op]
    x = randn((3, 4, 9), "f32", 1, device)
    x64 = torch.as_tensor(f64(x))
    for d in (0, 1, -1):
        assert_close(fn(x, dim=d), oracle(x64, d), "f32")
    assert_close(fn(x, -3), oracle(x64, 0), "f32")               # positional, as torch.sum(x, d)
    assert_close(fn(x, axis=1), oracle(x64, 1), "f32")
    assert_close(fn(x), oracle(x64, -1), "f32")                  # default: the last axis


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_over_any_dim(backend, device, log):
    fn, oracle = (tk.log_softmax, torch.log_softmax) if log else (tk.softmax, torch.softmax)
    x = randn((6, 3, 10), "f32", 2, device, scale=2.0)
    x64 = torch.as_tensor(f64(x))
    for d in (0, 1, -1):
        assert_close(fn(x, dim=d), oracle(x64, d), "f32")
    out = poisoned((6, 3, 10), "f32", device)
    assert fn(x, 1, out=out) is out                              # positional, as torch.softmax(x, d)
    assert_close(out, oracle(x64, 1), "f32")
    assert_close(fn(x.transpose(0, 2), axis=0), oracle(x64.transpose(0, 2), 0), "f32")


def test_softmax_over_a_long_non_last_dim(backend, device):
    # Rows of 1500 take the two-kernel path (statistics, then the pass), read through strides.
    x = randn((1500, 2), "f32", 3, device)
    assert_close(tk.softmax(x, dim=0), torch.softmax(torch.as_tensor(f64(x)), 0), "f32")


@pytest.mark.reference_only
def test_axis_and_dim_together_are_refused(backend, device):
    x = randn((4, 6), "f32", 4, device)
    with pytest.raises(ts.LaunchError) as e:
        tk.sum(x, axis=0, dim=0)  # call: both
    assert_at_call(e.value, __file__, "call: both", "sum: got both axis=0 and dim=0")
    assert "pass one of them" in e.value.help
    with pytest.raises(ts.LaunchError) as e:
        tk.softmax(x, 1, axis=0)  # call: conflicting
    assert_at_call(e.value, __file__, "call: conflicting", "softmax: got both axis=0 and dim=1")


@pytest.mark.reference_only
def test_a_dim_out_of_range_is_refused_under_its_name(backend, device):
    x = randn((4, 6), "f32", 5, device)
    with pytest.raises(ts.LaunchError) as e:
        tk.mean(x, dim=2)  # call: mean dim
    assert_at_call(e.value, __file__, "call: mean dim", "mean: dim 2 is out of range for shape (4, 6)")
    with pytest.raises(ts.LaunchError) as e:
        tk.log_softmax(x, dim=-3)  # call: softmax dim
    assert_at_call(e.value, __file__, "call: softmax dim", "log_softmax: dim -3 is out of range")
    with pytest.raises(ts.LaunchError) as e:
        tk.max(x, axis=True)  # call: bool axis
    assert_at_call(e.value, __file__, "call: bool axis", "max: axis True is out of range")


def test_argmax_over_dim(backend, device):
    x = randn((5, 70), "f32", 6, device)
    for d in (0, 1, -1):
        assert torch.equal(tk.argmax(x, dim=d).long(), torch.argmax(x, dim=d))
    ws = tk.argmax_workspace(x, dim=0)                           # scratch made for that axis
    out = torch.full((70,), -1, dtype=torch.int32, device=device)
    assert tk.argmax(x, out=out, workspace=ws, dim=0) is out
    assert torch.equal(out.long(), torch.argmax(x, dim=0))
