"""ts.from_torch's common case (runtime/constructors.py) runs without the runtime's lock: a
plain dense tensor over memory seen before, never handed to torch, every byte written, a
contiguous view inside its storage. Everything else takes the locked path, so each test
borrows some memory once (its storage now carries the state) and then borrows it again with
one fact changed, expecting what a first borrow does: the refusal (class, message, line),
the S14 tracking kept, the autograd history dropped."""
import numpy as np
import pytest
import torch

import tilesafe as ts
from runtime_helpers import assert_located

HERE = __file__


def test_a_view_outside_its_shrunk_storage_is_refused_on_the_second_borrow():
    t = torch.arange(16, dtype=torch.float32)
    ts.from_torch(t)                                   # the storage is known from now on
    t.untyped_storage().resize_(32)                    # torch can shrink a storage under its views
    with pytest.raises(ts.LaunchError) as e:
        ts.from_torch(t)  # shrunk
    assert "reaches outside its storage" in e.value.message
    assert_located(e.value, HERE, "shrunk")


def test_memory_handed_to_torch_keeps_its_s14_tracking_on_a_second_borrow():
    e = ts.empty(8)
    t = e.to_torch()                                   # unwritten bytes, handed over
    ts.from_torch(t)
    x = ts.from_torch(t.view(t.shape))                 # a new view of the same known memory
    with pytest.raises(ts.OwnershipError) as err:
        x.numpy()  # unwritten
    assert "has not been written" in err.value.message
    assert_located(err.value, HERE, "unwritten")
    t.fill_(2.0)                                       # torch wrote it: torch's bytes now
    np.testing.assert_array_equal(ts.from_torch(t.view(t.shape)).numpy(), np.full(8, 2.0, np.float32))


def test_a_non_contiguous_view_and_a_parameter_borrow_as_a_first_borrow_does():
    w = torch.nn.Parameter(torch.arange(12, dtype=torch.float32).reshape(3, 4))
    ts.from_torch(w)
    p = ts.from_torch(w)                               # a Parameter: not a plain torch.Tensor
    assert not p._torch().requires_grad and p.shape == (3, 4)
    q = ts.from_torch(w.detach().t())                  # a transposed view of known memory
    assert q.strides == (1, 4)
    np.testing.assert_array_equal(q.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)


def test_a_second_borrow_of_known_memory_shares_its_state_and_drops_autograd():
    a = torch.ones(6, requires_grad=True) * 3          # a non-leaf with history
    first = ts.from_torch(a)
    second = ts.from_torch(a[1:4])
    assert second._state is first._state and not second._torch().requires_grad
    np.testing.assert_array_equal(second.numpy(), np.full(3, 3.0, np.float32))


def test_a_tensor_on_another_device_is_refused():
    m = torch.empty(4, device="meta")
    with pytest.raises(ts.LaunchError) as e:
        ts.from_torch(m)  # meta
    assert "dense CPU or CUDA tensor" in e.value.message
    assert_located(e.value, HERE, "meta")
