"""The GPU form of a call plan's launch, written out per layout (runtime/planned_unrolled.py),
with stand-ins for the CUDA stream and Triton's launcher: it fills the call's addresses and TMA
descriptors into the layout's argument tuple, and declines (the full step then refuses or
computes, as a first call would) on a lent output (S8), another alignment class and unwritten
memory (S14); what it writes of memory that tracks initialisation is marked written."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_located, marker_line
from tilesafe.backends.triton.tma import Address, LayoutDescriptor
from tilesafe.runtime.storage_state import StorageState

HERE = __file__


def _rand(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.fixture
def gpu_form(gpu_form_recording):
    """Every fast launch takes the GPU form on CPU tensors: per argument k, its address at
    position k of the tuple and a descriptor of it at position n + k; then a layout fact. The
    start records (stream, args) and launches nothing; `ran` records what each run returned."""
    started, ran = gpu_form_recording(lambda n: (
        (None,) * (2 * n) + ("a fact of the layout",),
        tuple((n + k, k, ("shape", k), ("strides", k), ("box", k)) for k in range(n))))
    tk.rms_norm.plans.plans.clear()
    yield started, ran
    for t in list(_FINISH):
        _finish(t)
    _FINISH.clear()
    tk.rms_norm.plans.plans.clear()                       # no later test meets a stand-in's plan


_FINISH: list = []


def _finish(*tensors):
    """The stand-in work is over (its completions let go of the memory)."""
    for t in tensors:
        for access in StorageState.of(t)._pending:
            getattr(access.future, "_finish", lambda: None)()


def _warm(w, shape=(2, 32)):
    """Three calls of rms_norm's out= layout: the third takes the GPU form."""
    for seed in range(3):
        x, out = _rand(shape, seed), torch.zeros(shape)
        tk.rms_norm(x, w, out=out)
        _finish(x, out)
    _FINISH.append(w)


def test_the_tuple_holds_each_address_and_a_descriptor_at_it(gpu_form):
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((32,), 1)
        _warm(w)
        for seed in range(3):
            base = _rand((3, 32), seed)
            x, out = base[1:], torch.zeros(2, 32)            # an input that starts past its storage's start
            started.clear()
            tk.rms_norm(x, w, out=out)
            _finish(x, out)
            assert ran[-1] is True
            (stream, args), = started
            n = (len(args) - 1) // 2
            assert stream == 7 and args[-1] == "a fact of the layout" and n == 3
            assert sorted(args[:n]) == sorted([x.data_ptr(), w.data_ptr(), out.data_ptr()])
            for k in range(n):
                d = args[n + k]
                assert type(d) is LayoutDescriptor and type(d.base) is Address
                assert (d.base.data_ptr(), d.shape, d.strides, d.block_shape, d.padding) == \
                    (args[k], ("shape", k), ("strides", k), ("box", k), "zero")


def test_lent_out_bytes_are_refused_as_a_first_call_refuses_them(gpu_form):
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((32,), 1)
        _warm(w)
        x, out = _rand((2, 32), 5), torch.full((2, 32), 7.0)
        lent = ts.from_torch(out).partition((1, 32))  # gpu-lent-here
        started.clear()
        with pytest.raises(ts.OwnershipError) as e:
            tk.rms_norm(x, w, out=out)  # gpu-lent-call
        assert ran[-1] is False and started == []          # the GPU form declined: nothing started
        assert e.value.message.endswith(f"(lent at {HERE}:{marker_line(HERE, 'gpu-lent-here')})")
        assert_located(e.value, HERE, "gpu-lent-call")
        assert (out == 7.0).all()
        lent.unpartition()


def test_another_alignment_class_is_declined_and_computed_by_the_full_step(gpu_form):
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((48,), 1)
        _warm(w, (3, 48))
        base = _rand((145,), 2)
        shifted = base[1:145].view(3, 48)                   # 4 bytes on: another 16-byte class
        started.clear()
        torch.testing.assert_close(tk.rms_norm(shifted, w, out=torch.zeros(3, 48)), _rms(shifted, w),
                                   rtol=2e-4, atol=2e-5)
        assert False in ran and started == []


def test_unwritten_memory_is_refused_and_what_it_writes_is_marked(gpu_form):
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((32,), 1)
        _warm(w)
        unwritten = ts.empty((2, 32)).to_torch()
        started.clear()
        with pytest.raises(ts.OwnershipError) as e:
            tk.rms_norm(unwritten, w, out=torch.zeros(2, 32))  # gpu-unwritten
        assert "came from ts.empty and has not been written" in e.value.message
        assert_located(e.value, HERE, "gpu-unwritten")
        assert started == []
        out = ts.empty((2, 32)).to_torch()                  # tracks initialisation: written by the launch
        x = _rand((2, 32), 3)
        tk.rms_norm(x, w, out=out)
        _finish(x, out)
        assert ran[-1] is True and len(started) == 1
        assert StorageState.of(out).is_written(out)


def test_two_known_storages_over_the_same_bytes_are_refused_by_the_written_out_hit():
    """Both storages borrowed before (their states merged: one memory), so the hit's common case
    takes them; their states are not apart, so the whole-call check runs and refuses."""
    from call_helpers import assert_unchanged, snapshot
    tk.rms_norm.plans.plans.clear()
    with ts.backend("reference"):
        w = _rand((32,), 1)
        for seed in range(3):
            tk.rms_norm(_rand((1, 32), seed), w, out=torch.zeros(1, 32))
        (plan,) = tk.rms_norm.plans.plans.values()
        assert plan.hit.unrolled is not None                     # the written-out form takes this layout
        base = _rand((64,), 9)
        x = base[0:32].view(1, 32)
        out = torch.from_numpy(base.numpy()[16:48]).view(1, 32)  # another storage, half over x
        ts.from_torch(x), ts.from_torch(out)                     # both known: one merged state
        before = snapshot(base, w)
        with pytest.raises(ts.AliasError) as e:
            tk.rms_norm(x, w, out=out)  # known-two-storages
        assert e.value.message == "rms_norm: `out` shares memory with the input `x`"
        assert_located(e.value, HERE, "known-two-storages")
        assert_unchanged(before, base, w)
    tk.rms_norm.plans.plans.clear()


def test_a_repeated_launch_registers_its_own_completion_for_the_same_bytes(gpu_form):
    """S9: a launch over bytes an earlier launch of the same kind and stream still has pending
    takes that entry's place (one entry per bytes, kind and stream): the entry then holds the
    new launch's completion, so a host read waits for the newer launch."""
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((32,), 1)
        _warm(w)
        x, out = _rand((2, 32), 4), torch.zeros(2, 32)
        _FINISH.extend([x, out])
        seen = []
        for _ in range(3):
            tk.rms_norm(x, w, out=out)
            assert ran[-1] is True
            writes = [a for a in StorageState.of(out)._pending if a.is_write]
            assert len(writes) == 1                                 # in place, not appended
            seen.append(writes[0].future)
        assert len({id(f) for f in seen}) == 3                      # each launch's own completion
        reads = [a for a in StorageState.of(x)._pending if not a.is_write]
        assert len(reads) == 1 and reads[0].future is seen[-1]


def test_two_known_storages_over_the_same_bytes_read_together_give_the_result():
    """Two inputs in one memory (two storages, both known: one merged state) are not apart, so
    the written-out hit runs the steps with the whole-call checks, which accept reads of shared
    bytes: the call hands back its output, as a first call does, on every call."""
    tk.rms_norm.plans.plans.clear()
    with ts.backend("reference"):
        for seed in range(3):
            tk.rms_norm(_rand((1, 32), seed), _rand((32,), 7), out=torch.zeros(1, 32))
        (plan,) = tk.rms_norm.plans.plans.values()
        assert plan.hit.unrolled is not None                     # the written-out form takes this layout
        base = _rand((64,), 9).numpy()
        x = torch.from_numpy(base[0:32]).view(1, 32)
        w = torch.from_numpy(base[16:48])                        # another storage, half over x
        out = torch.zeros(1, 32)
        ts.from_torch(x), ts.from_torch(w), ts.from_torch(out)   # all known (x, w: one merged state)
        for _ in range(3):
            out.fill_(float("nan"))                              # poisoned: each call writes it
            got = tk.rms_norm(x, w, out=out)
            assert got is out
            torch.testing.assert_close(out, _rms(x, w), rtol=2e-4, atol=2e-5)
    tk.rms_norm.plans.plans.clear()


def _decode_attention_oracle(q, k, v, n):
    scores = torch.einsum("hd,hsd->hs", q, k.repeat_interleave(2, 0)[:, :n]) / 8 ** 0.5
    return torch.einsum("hs,hsd->hd", scores.softmax(-1), v.repeat_interleave(2, 0)[:, :n])


_CALLS = {   # name -> (tensors, call, oracle), the tensors all known before the first call
    "a new output": (lambda: [_rand((2, 32), 1), _rand((32,), 2)],
                     lambda x, w: tk.rms_norm(x, w),
                     lambda x, w: _rms(x, w)),
    "a tuple with the sum": (lambda: [_rand((2, 32), 1), _rand((32,), 2), _rand((2, 32), 3)],
                             lambda x, w, r: tk.rms_norm(x, w, residual=r),
                             lambda x, w, r: (_rms(x + r, w), x + r)),
    "a kept workspace": (lambda: [_rand((4, 8), 1), _rand((2, 16, 8), 2), _rand((2, 16, 8), 3),
                                  torch.tensor([11], dtype=torch.int32)],
                         lambda q, k, v, n: tk.decode_attention(q, k, v, n),
                         lambda q, k, v, n: _decode_attention_oracle(q, k, v, 11)),
}


@pytest.mark.parametrize("case", list(_CALLS))
def test_the_written_out_hit_serves_known_memory_without_the_loops(monkeypatch, case):
    """Every argument's memory known: from the layout's third call each call takes the written-out
    hit alone (CallHit's loops never run), and computes each call's own result: a new output
    per call, a tuple of results, the workspace kept from call to call."""
    from tilesafe.kernels.call_hits import CallHit
    make, call, oracle = _CALLS[case]
    walked = []
    real_walk = CallHit._walk
    monkeypatch.setattr(CallHit, "_walk", lambda self, places: walked.append(1) or real_walk(self, places))
    for fn in (tk.rms_norm, tk.decode_attention):
        fn.plans.plans.clear()
    with ts.backend("reference"):
        tensors = make()
        for t in tensors:
            ts.from_torch(t)                                         # known memory
        results, kept = [], []
        for i in range(6):
            tensors[0].copy_(_rand(tuple(tensors[0].shape), 20 + i))  # each call's own input
            walked.clear()
            got = call(*tensors)
            want = oracle(*tensors)
            got, want = (got, want) if type(want) is tuple else ((got,), (want,))
            assert type(got) is tuple and len(got) == len(want)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=2e-4, atol=2e-5)
            if i >= 3:
                hits = [p.hit for fn in (tk.rms_norm, tk.decode_attention) for p in fn.plans.plans.values()]
                (hit,) = [h for h in hits if h is not None]
                assert hit.unrolled is not None and walked == []     # the written-out hit alone
                kept.append(sorted(root[2] for root in hit.kept.values()))
            results.append(got)
        new = [r[0].data_ptr() for r in results]
        assert len(set(new)) == len(new)                             # a new output each call
        assert kept[0] == kept[1] == kept[2]                         # the same workspace, if any, every call
        assert (kept[0] != []) == (case == "a kept workspace")
    for plans in (tk.rms_norm.plans.plans, tk.decode_attention.plans.plans):
        plans.clear()


def test_a_view_of_another_argument_s_storage_gets_its_own_address(gpu_form):
    """`out` a later part of x's storage: the plan views it from x's root at a byte offset,
    which the written-out launch adds to the root's address (torch's own data_ptr() of each
    argument is the oracle), for new memory on every call."""
    started, ran = gpu_form
    with ts.backend("reference"):
        w = _rand((32,), 1)
        _FINISH.append(w)
        for seed in range(6):
            buf = _rand((4, 32), seed)
            x, out = buf[0:2], buf[2:4]
            started.clear()
            tk.rms_norm(x, w, out=out)
            _finish(buf)
            if seed < 3:
                continue                                     # the first calls take the full path
            assert ran[-1] is True
            (plan,) = tk.rms_norm.plans.plans.values()
            (launch,) = [pl for pl in plan.hit.launches if pl is not None]
            assert [(name, off) for name, _, off in launch.access] == [("y", 64), ("x", 0), ("w", None)]
            (_, args), = started
            want = {"y": out.data_ptr(), "x": x.data_ptr(), "w": w.data_ptr()}
            assert list(args[:3]) == [want[name] for name, _, _ in launch.access]
            assert [d.base.data_ptr() for d in args[3:6]] == list(args[:3])
