"""A call with a caller's `workspace=` (tilesafe tensors: decode_attention's, argmax's) takes its
plan's written-out hit (kernels/call_hits_unrolled.py) as torch-only calls do: from the layout's
third call CallHit's loops never run, and each call computes its own result. What the hit
trusts of a workspace tensor — not handed to torch, not lent — is read on every call: a call
of the same layout whose workspace was partitioned or handed to torch since the last one, or
whose out= reaches the workspace's bytes through another storage, is refused as a fresh call
refuses it (class, message, the user's line, nothing written), and so is a hand-over by
another thread after the key was read."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_located, assert_unchanged, refused_twice, snapshot
from tilesafe.kernels import call_plans
from tilesafe.kernels.call_hits import CallHit

HERE = __file__


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def _oracle(q, k, v, n):
    """Attention of q (4, 8) over the first n keys of (2, S, 8) caches, two heads per KV head."""
    scores = torch.einsum("hd,hsd->hs", q, k.repeat_interleave(2, 0)[:, :n]) / 8 ** 0.5
    return torch.einsum("hs,hsd->hd", scores.softmax(-1), v.repeat_interleave(2, 0)[:, :n])


@pytest.fixture
def decode():
    """q, the caches, the length, an out= buffer and the caller's workspace; plans cleared."""
    tk.decode_attention.plans.plans.clear()
    q, k, v = _rand((4, 8), 1), _rand((2, 16, 8), 2), _rand((2, 16, 8), 3)
    n, out = torch.tensor([11], dtype=torch.int32), torch.zeros(4, 8)
    with ts.backend("reference"):
        yield q, k, v, n, out, tk.decode_workspace(q, k)
    tk.decode_attention.plans.plans.clear()


def _warm(decode, calls=3):
    q, k, v, n, out, ws = decode
    for _ in range(calls):
        tk.decode_attention(q, k, v, n, out=out, workspace=ws)


def test_a_caller_s_workspace_takes_the_written_out_hit(decode, monkeypatch):
    q, k, v, n, out, ws = decode
    walked = []
    real_walk = CallHit._walk
    monkeypatch.setattr(CallHit, "_walk", lambda self, places: walked.append(1) or real_walk(self, places))
    for i in range(6):
        q.copy_(_rand((4, 8), 20 + i))                 # each call's own query
        out.fill_(float("nan"))                        # poisoned: each call writes it
        walked.clear()
        got = tk.decode_attention(q, k, v, n, out=out, workspace=ws)
        assert got is out
        torch.testing.assert_close(out, _oracle(q, k, v, 11), rtol=2e-4, atol=2e-5)
        if i >= 3:
            (plan,) = tk.decode_attention.plans.plans.values()
            assert plan.hit.unrolled is not None and walked == []    # the written-out hit alone


def test_a_workspace_lent_since_the_last_call_is_refused(decode):
    q, k, v, n, out, ws = decode
    _warm(decode)
    lent = ws.m.partition((1,) * ws.m.ndim)  # ws-lent-here
    before = snapshot(out)

    def call():
        return tk.decode_attention(q, k, v, n, out=out, workspace=ws)  # ws-lent-call
    message = refused_twice(call, ts.OwnershipError, HERE, "ws-lent-call", tk.decode_attention)
    assert message.startswith("cannot use `partition()`: this tensor is lent to a partition (lent at ")
    assert_unchanged(before, out)
    lent.unpartition()
    _warm(decode)
    out.fill_(float("nan"))
    tk.decode_attention(q, k, v, n, out=out, workspace=ws)           # given back: accepted again
    torch.testing.assert_close(out, _oracle(q, k, v, 11), rtol=2e-4, atol=2e-5)


def test_a_workspace_handed_to_torch_since_the_last_call_is_refused(decode):
    q, k, v, n, out, ws = decode
    _warm(decode)
    ws.m.to_torch()
    before = snapshot(out)

    def call():
        return tk.decode_attention(q, k, v, n, out=out, workspace=ws)  # ws-handed-call
    message = refused_twice(call, ts.OwnershipError, HERE, "ws-handed-call", tk.decode_attention)
    assert message.startswith("cannot use `partition()`: this tensor was handed to torch at ")
    assert_unchanged(before, out)


def test_a_workspace_handed_over_after_the_key_was_read_is_refused(decode, monkeypatch):
    """Another thread's hand-over between call_key and the written-out hit: the hit goes to
    CallHit's loops, which refuse it as the full path's first read does."""
    q, k, v, n, out, ws = decode
    _warm(decode)
    real = call_plans.call_key

    def racing(*args, **kwargs):
        found = real(*args, **kwargs)
        ws.l.to_torch()                                # the other thread's hand-over, just after
        return found

    monkeypatch.setattr(call_plans, "call_key", racing)
    with pytest.raises(ts.OwnershipError) as e:
        tk.decode_attention(q, k, v, n, out=out, workspace=ws)  # ws-raced-call
    assert e.value.message.startswith("cannot use `dtype`: this tensor was handed to torch at ")
    assert_located(e.value, HERE, "ws-raced-call")


def test_an_argmax_workspace_takes_the_written_out_hit_and_each_call_s_answer():
    tk.argmax.plans.plans.clear()
    with ts.backend("reference"):
        x, out = _rand((2, 300), 1), torch.zeros(2, dtype=torch.int32)
        ws = tk.argmax_workspace(x)
        for i in range(6):
            x.copy_(_rand((2, 300), 10 + i))
            out.fill_(-1)
            tk.argmax(x, out=out, workspace=ws)
            assert out.tolist() == x.argmax(-1).tolist()
        (plan,) = tk.argmax.plans.plans.values()
        assert plan.hit.unrolled is not None
    tk.argmax.plans.plans.clear()


def test_an_out_over_the_workspace_s_bytes_through_another_storage_is_refused(monkeypatch):
    """The same layout as the warm calls (out= in a storage of its own), but out's bytes are
    workspace.acc's, reached through another storage over the same memory (known: one merged
    state): the written-out hit finds the roots not apart and runs the whole-call check, which
    refuses as a fresh call refuses it, nothing written."""
    walked = []
    real_walk = CallHit._walk
    monkeypatch.setattr(CallHit, "_walk", lambda self, places: walked.append(1) or real_walk(self, places))
    tk.decode_attention.plans.plans.clear()
    with ts.backend("reference"):
        q, k, v = _rand((4, 8), 1), _rand((2, 16, 8), 2), _rand((2, 16, 8), 3)
        n = torch.tensor([11], dtype=torch.int32)
        shapes = tk.decode_workspace(q, k)
        acc = torch.zeros(shapes.acc.shape)
        m, l = (torch.zeros(t.shape) for t in (shapes.m, shapes.l))
        ws = tk.DecodeWorkspace(ts.from_torch(acc), ts.from_torch(m), ts.from_torch(l))
        for _ in range(3):
            tk.decode_attention(q, k, v, n, out=torch.zeros(4, 8), workspace=ws)
        (plan,) = tk.decode_attention.plans.plans.values()
        assert plan.hit.unrolled is not None
        over = torch.from_numpy(acc.numpy()).view(-1)[:32].view(4, 8)   # another storage, acc's first bytes
        ts.from_torch(over)                                 # known: acc's state and its, merged
        walked.clear()
        before = snapshot(acc, q)
        errors = []
        for _ in range(2):                                  # the hit, then a fresh call's full path
            with pytest.raises(ts.AliasError) as e:
                tk.decode_attention(q, k, v, n, out=over, workspace=ws)  # ws-alias-call
            assert_located(e.value, HERE, "ws-alias-call")
            errors.append(e.value.message)
            if len(errors) == 1:
                assert walked == []                         # the written-out hit refused it itself
            tk.decode_attention.plans.plans.clear()
        assert errors[0] == errors[1] == "decode_attention: `out` and `workspace.acc` share memory"
        assert_unchanged(before, acc, q)
    tk.decode_attention.plans.plans.clear()
