"""A planned launch whose kernel reads the same bytes through two arguments (a GEMV's unused
operand passed the input: `linear(x, w, out=o)`'s bias, `linear(x, w, residual=r, out=r)`'s
`up`) checks, orders and registers them once in its written-out GPU form
(planned_unrolled._same_reads): the argument tuple still holds the address at every place, the
pending registry holds one read of those bytes, and lent memory still declines the form (S8).
CPU stand-ins for the CUDA stream and Triton's launcher."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.runtime.planned_unrolled import _same_reads
from tilesafe.runtime.storage_state import StorageState


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


@pytest.fixture
def gpu_form(gpu_form_recording):
    """Every fast launch takes the GPU form on CPU tensors: argument k's address at position k
    of the tuple; `started` records (stream, args); nothing runs."""
    started, ran = gpu_form_recording()
    tk.linear.plans.plans.clear()
    yield started, ran
    tk.linear.plans.plans.clear()


def _finish(*tensors):
    for t in tensors:
        for access in StorageState.of(t)._pending:
            getattr(access.future, "_finish", lambda: None)()


def reads_future(t):
    """The completion of the latest launch that registered a read of `t`'s memory."""
    return [a.future for a in StorageState.of(t)._pending if not a.is_write][-1]


def _launch(plan):
    (launch,) = [pl for pl in plan.hit.launches if pl is not None]
    return launch


CALLS = {   # the plain GEMV reads x's row as its unused bias too; the fused one as `up` and `g` as well
    "linear": lambda x, w, r: tk.linear(x, w, out=r),
    "linear with residual": lambda x, w, r: tk.linear(x, w, residual=r, out=r),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_a_view_read_twice_is_checked_and_registered_once(gpu_form, case):
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((16, 32), 1)
        for seed in range(6):
            x, r = _rand((1, 32), 10 + seed), _rand((1, 16), 20 + seed)    # new memory every call
            started.clear()
            got = CALLS[case](x, w, r)
            assert got is r
            if seed < 3:
                _finish(x, w, r)
                continue                                  # the first calls take the full path
            assert ran[-1] is True
            (plan,) = tk.linear.plans.plans.values()
            launch = _launch(plan)
            same = _same_reads(launch)
            assert same                                   # the fused kernel reads x through two arguments
            (_, args), = started
            names = [name for name, _, _ in launch.access]
            want = {id(x): x.data_ptr(), id(w): w.data_ptr(), id(r): r.data_ptr()}
            for k, j in same.items():                     # each place holds the shared view's address
                assert args[k] == args[j] and launch.slots[k] == launch.slots[j], names
            assert sorted(set(args)) == sorted(set(want.values()))
            reads = [a.byteset for a in StorageState.of(x)._pending if not a.is_write]
            assert len(reads) == 1                               # x's row read through each argument: one entry
            assert all(a.future is reads_future(x) for a in StorageState.of(x)._pending)   # this launch's
            _finish(x, w, r)


def test_the_shared_view_s_memory_lent_out_declines_the_gpu_form(gpu_form):
    """S8 for the view read twice is its first argument's check (one state): lent memory
    declines the written-out launch before anything started, and the full step decides."""
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((16, 32), 1)
        for seed in range(3):
            x, r = _rand((1, 32), 10 + seed), _rand((1, 16), 20 + seed)
            tk.linear(x, w, residual=r, out=r)
            _finish(x, w, r)
        x, r = _rand((1, 32), 40), _rand((1, 16), 41)
        ts.from_torch(x)
        lent = ts.from_torch(x.view(1, 32)).partition((1, 32))   # x's memory lent through another handle
        want = x @ w.T + r
        started.clear()
        ran.clear()
        got = tk.linear(x, w, residual=r, out=r)
        assert ran and ran[0] is False and started == []  # declined: nothing started
        assert got is r                                   # the full step accepts a read of lent bytes
        torch.testing.assert_close(r, want)               # through another handle, and computes it
        lent.unpartition()
