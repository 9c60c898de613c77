"""Library calls on cached layouts: a call whose arguments have the layout of an earlier call
skips the launch checks that layout decides (new torch tensors each call, as a user has
them), and a call that differs from an accepted one only in aliasing, lending,
initialisation or a torch version counter is refused exactly as a first call would be:
error class, message, the line of the call, nothing written."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_located, assert_unchanged, marker_line, snapshot

HERE = __file__


def _rand(shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 4 - 2).to(device)


def test_fresh_torch_tensors_of_a_seen_layout_skip_the_launch_checks(backend, device, binds):
    for seed in range(4):
        x, y, h, w = _rand((3, 40), seed, device), _rand((3, 40), seed + 9, device), \
            _rand((4, 64), seed, device), _rand((64,), seed + 1, device)
        torch.testing.assert_close(tk.add(x, y), x + y)
        torch.testing.assert_close(tk.rms_norm(h, w), h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                                   rtol=1e-4, atol=1e-5)
        if seed == 0:
            first = binds[0]
    assert first <= 2                                             # at most the first call of each was checked in full
    assert binds[0] == first                                      # and none of the later ones


def test_an_out_partly_over_an_operand_in_a_seen_layout_is_refused(backend, device):
    base = _rand((2, 64), 1, device)
    x, y = _rand((64,), 2, device), _rand((64,), 3, device)
    tk.add(x, base[1], out=base[0])                               # disjoint rows: fine
    torch.testing.assert_close(base[0], x + base[1])
    flat = base.view(-1)
    out, y2 = flat[0:64], flat[32:96]                              # the same layouts, now overlapping
    before = snapshot(base, x)
    with pytest.raises(ts.AliasError) as e:
        tk.add(x, y2, out=out)  # alias-call
    assert e.value.message == "add: `out` shares memory with the input `y`"
    assert_located(e.value, HERE, "alias-call")
    assert_unchanged(before, base, x)
    _ = y


def test_an_out_whose_bytes_another_partition_holds_is_refused(backend, device):
    x, y = _rand((64,), 4, device), _rand((64,), 5, device)
    out = ts.zeros(64, device=device)
    tk.add(x, y, out=out)                                         # accepted: seen layout
    holder = out[0:16].partition((16,))  # lent-here
    with pytest.raises(ts.OwnershipError) as e:
        tk.add(x, y, out=out)  # lent-call
    assert e.value.message == (f"cannot partition this tensor: its bytes are lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'lent-here')})")
    assert_located(e.value, HERE, "lent-call")
    holder.unpartition()
    tk.add(x, y, out=out)
    torch.testing.assert_close(out.to_torch(), x + y)


def test_a_lent_input_in_a_seen_layout_is_refused(backend, device):
    x, y = ts.tensor(_rand((64,), 6, device)), ts.tensor(_rand((64,), 7, device))
    tk.add(x, y)
    lent = y.partition((16,))  # lent-input
    with pytest.raises(ts.OwnershipError) as e:
        tk.add(x, y)  # lent-input-call
    assert e.value.message == (f"cannot use `dtype`: this tensor is lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'lent-input')})")
    assert_located(e.value, HERE, "lent-input-call")
    lent.unpartition()


def test_an_unwritten_input_in_a_seen_layout_is_refused(backend, device):
    x, y = ts.tensor(_rand((64,), 8, device)), ts.tensor(_rand((64,), 9, device))
    tk.add(x, y)
    u = ts.empty(64, device=device)
    out = ts.full(64, 3.0, device=device)
    with pytest.raises(ts.OwnershipError) as e:
        tk.add(x, u, out=out)  # unwritten-call
    assert e.value.message == ("argument `y` of `binary_kernel` is read, but it came from ts.empty and has "
                               "not been written")
    assert_located(e.value, HERE, "unwritten-call")
    assert (out.numpy() == 3.0).all()


def test_a_torch_version_counter_decides_between_two_calls_of_one_layout(backend, device):
    x = _rand((64,), 10, device)
    tk.add(x, _rand((64,), 11, device))                           # the layout is seen
    handed = ts.empty(64, device=device).to_torch()               # unwritten memory handed to torch
    with pytest.raises(ts.OwnershipError) as e:
        tk.add(x, handed)  # handed-call
    assert "came from ts.empty and has not been written" in e.value.message
    assert_located(e.value, HERE, "handed-call")
    handed.fill_(0.5)                                             # torch writes it: its counter moves
    torch.testing.assert_close(tk.add(x, handed), x + 0.5)


def test_calls_of_one_layout_that_differ_in_place_or_in_a_scalar_compute_each_their_own(backend, device):
    a0, b0 = _rand((6, 40), 12, device), _rand((6, 40), 13, device)
    for step in range(3):                                         # every form twice: the second uses its plan
        a, b, c = a0.clone(), b0.clone(), torch.full_like(a0, float("nan"))
        torch.testing.assert_close(tk.sub(a, b, out=c), a0 - b0)             # out apart
        torch.testing.assert_close(tk.sub(a, b, out=a), a0 - b0)             # out is the first operand
        a = a0.clone()
        torch.testing.assert_close(tk.sub(a, b, out=b), a0 - b0)             # out is the second operand
        b = b0.clone()
        torch.testing.assert_close(tk.sub(float(step), b), step - b0)        # a new scalar each time
        torch.testing.assert_close(tk.sub(b, float(step)), b0 - step)        # the scalar on the other side
        torch.testing.assert_close(tk.mul(b, float(step + 2)), b0 * (step + 2))
        torch.testing.assert_close(tk.add(a, a), a0 + a0)                    # one tensor as both operands
        torch.testing.assert_close(tk.add(a, b[0]), a0 + b0[0])              # a broadcast operand
