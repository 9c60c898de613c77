"""Recorded call plans (kernels/call_plans.py): every library function on the Qwen3 path,
called again with new torch tensors of a seen layout, redoes its first call's record — no
config lookup, no argument Python — and computes what torch computes; a call that differs
from an accepted one only in aliasing, lending, initialisation or a torch version counter
is refused exactly as a first call would be: class, message, the line of the call, nothing
written."""
import math

import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_located, assert_unchanged, marker_line, snapshot
from tilesafe.kernels import configs

HERE = __file__


def _rand(shape, seed, device, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 2 - 1).to(device=device, dtype=dtype)


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos, theta=1e6):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ang = pos.double()[:, None] * inv                                     # (T, D/2)
    cos, sin = torch.cos(ang)[:, None].float(), torch.sin(ang)[:, None].float()
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _decode(q, k, v, n):
    group = q.shape[0] // k.shape[0]
    kk, vv = k[:, :n].repeat_interleave(group, 0), v[:, :n].repeat_interleave(group, 0)   # (H, n, D)
    s = torch.einsum("hd,hnd->hn", q, kk) / math.sqrt(q.shape[1])
    return torch.einsum("hn,hnd->hd", s.softmax(-1), vv)


def _calls(device):
    """(name, make(seed) -> torch tensors, call(t), call with out=(t), oracle(t)) per function."""
    pos = lambda s: torch.tensor([3, 7], device=device, dtype=torch.int32)          # noqa: E731
    n = lambda s: torch.tensor([5], device=device, dtype=torch.int32)               # noqa: E731
    e = lambda *shape, dt=torch.float32: torch.full(shape, float("nan"), device=device, dtype=dt)   # noqa: E731
    return [
        ("linear M=1", lambda s: dict(x=_rand((1, 32), s, device), w=_rand((24, 32), s + 1, device), o=e(1, 24)),
         lambda t: tk.linear(t["x"], t["w"]), lambda t: tk.linear(t["x"], t["w"], out=t["o"]),
         lambda t: F.linear(t["x"], t["w"])),
        ("linear M=4", lambda s: dict(x=_rand((4, 32), s, device), w=_rand((24, 32), s + 1, device), o=e(4, 24)),
         lambda t: tk.linear(t["x"], t["w"]), lambda t: tk.linear(t["x"], t["w"], out=t["o"]),
         lambda t: F.linear(t["x"], t["w"])),
        ("matmul", lambda s: dict(a=_rand((20, 16), s, device), b=_rand((16, 24), s + 1, device), o=e(20, 24)),
         lambda t: tk.matmul(t["a"], t["b"]), lambda t: tk.matmul(t["a"], t["b"], out=t["o"]),
         lambda t: t["a"] @ t["b"]),
        ("bmm", lambda s: dict(a=_rand((2, 8, 16), s, device), b=_rand((2, 16, 8), s + 1, device), o=e(2, 8, 8)),
         lambda t: tk.bmm(t["a"], t["b"]), lambda t: tk.bmm(t["a"], t["b"], out=t["o"]),
         lambda t: torch.bmm(t["a"], t["b"])),
        ("rms_norm", lambda s: dict(x=_rand((2, 32), s, device), w=_rand((32,), s + 1, device), o=e(2, 32)),
         lambda t: tk.rms_norm(t["x"], t["w"]), lambda t: tk.rms_norm(t["x"], t["w"], out=t["o"]),
         lambda t: _rms(t["x"], t["w"])),
        ("rms_norm + residual", lambda s: dict(x=_rand((2, 32), s, device), r=_rand((2, 32), s + 2, device),
                                               w=_rand((32,), s + 1, device), o=e(2, 32), h=e(2, 32)),
         lambda t: tk.rms_norm(t["x"], t["w"], residual=t["r"]),
         lambda t: tk.rms_norm(t["x"], t["w"], residual=t["r"], out=t["o"], residual_out=t["h"]),
         lambda t: (_rms(t["x"] + t["r"], t["w"]), t["x"] + t["r"])),
        ("rope", lambda s: dict(x=_rand((2, 4, 16), s, device), p=pos(s), o=e(2, 4, 16)),
         lambda t: tk.rope(t["x"], t["p"]), lambda t: tk.rope(t["x"], t["p"], out=t["o"]),
         lambda t: _rope(t["x"], t["p"])),
        ("embedding", lambda s: dict(i=torch.tensor([1, 6, 2], device=device, dtype=torch.int32),
                                     tab=_rand((8, 16), s, device), o=e(3, 16)),
         lambda t: tk.embedding(t["i"], t["tab"]), lambda t: tk.embedding(t["i"], t["tab"], out=t["o"]),
         lambda t: F.embedding(t["i"].long(), t["tab"])),
        ("argmax", lambda s: dict(x=_rand((2, 50), s, device),
                                  o=torch.full((2,), -7, device=device, dtype=torch.int32)),
         lambda t: tk.argmax(t["x"]), lambda t: tk.argmax(t["x"], out=t["o"]),
         lambda t: t["x"].argmax(-1).to(torch.int32)),
        ("softmax", lambda s: dict(x=_rand((2, 40), s, device), o=e(2, 40)),
         lambda t: tk.softmax(t["x"]), lambda t: tk.softmax(t["x"], out=t["o"]), lambda t: t["x"].softmax(-1)),
        ("decode_attention", lambda s: dict(q=_rand((4, 16), s, device), k=_rand((2, 8, 16), s + 1, device),
                                            v=_rand((2, 8, 16), s + 2, device), n=n(s), o=e(4, 16)),
         lambda t: tk.decode_attention(t["q"], t["k"], t["v"], t["n"]),
         lambda t: tk.decode_attention(t["q"], t["k"], t["v"], t["n"], out=t["o"]),
         lambda t: _decode(t["q"], t["k"], t["v"], 5)),
        ("flash_attention", lambda s: dict(q=_rand((2, 8, 16), s, device), k=_rand((2, 8, 16), s + 1, device),
                                           v=_rand((2, 8, 16), s + 2, device), o=e(2, 8, 16)),
         lambda t: tk.flash_attention(t["q"], t["k"], t["v"], causal=True),
         lambda t: tk.flash_attention(t["q"], t["k"], t["v"], causal=True, out=t["o"]),
         lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)),
    ]


@pytest.fixture
def lookups(monkeypatch):
    """How many config lookups ran: only a call's full path looks one up, never its plan."""
    count = [0]
    real = configs.lookup

    def counting(*a, **k):
        count[0] += 1
        return real(*a, **k)
    monkeypatch.setattr(configs, "lookup", counting)
    return count


@pytest.mark.parametrize("case", [c[0] for c in _calls("cpu")])
def test_a_seen_layout_redoes_its_plan_with_new_tensors(backend, device, lookups, case):
    name, make, call, call_out, oracle = next(c for c in _calls(device) if c[0] == case)
    for seed in range(3):                                         # new tensors (and values) every call
        t = make(10 * seed)
        want = oracle(t)
        got, got_out = call(t), call_out(t)
        if seed == 0:
            first = lookups[0]
        wants = want if isinstance(want, tuple) else (want,)
        for g in (got, got_out):
            for a, b in zip(g if isinstance(g, tuple) else (g,), wants):
                torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-5)
        assert (got_out[0] if isinstance(got_out, tuple) else got_out) is t["o"]
    assert lookups[0] == first                                    # the later calls of both layouts: plans only


def test_tilesafe_tensors_take_plans_and_get_tilesafe_tensors_back(backend, device, lookups):
    wt = _rand((32,), 1, device)
    w = ts.tensor(wt)
    for seed in range(3):
        x = _rand((2, 32), seed, device)
        y = tk.rms_norm(ts.tensor(x), w)
        assert isinstance(y, ts.Tensor)
        torch.testing.assert_close(y.to_torch(), _rms(x, wt), rtol=2e-4, atol=2e-5)
        if seed == 0:
            first = lookups[0]
    assert lookups[0] == first


def test_an_out_over_the_input_in_a_seen_layout_is_refused_before_any_launch(backend, device):
    w = _rand((32,), 1, device)
    x, o = _rand((1, 32), 2, device), torch.zeros(1, 32, device=device)
    tk.rms_norm(x, w, out=o)                                      # the layout is seen, and planned
    tk.rms_norm(_rand((1, 32), 3, device), w, out=torch.zeros(1, 32, device=device))
    flat = _rand((48,), 4, device)
    x2, o2 = flat[0:32].view(1, 32), flat[16:48].view(1, 32)       # the same layouts, now overlapping
    before = snapshot(flat, w)
    with pytest.raises(ts.AliasError) as e:
        tk.rms_norm(x2, w, out=o2)  # alias-plan-call
    assert e.value.message == "rms_norm: `out` shares memory with the input `x`"
    assert_located(e.value, HERE, "alias-plan-call")
    assert_unchanged(before, flat, w)


def test_a_two_kernel_call_refuses_an_aliased_out_before_its_first_launch(backend, device):
    x, o = _rand((2, 50), 5, device), torch.zeros(2, dtype=torch.int32, device=device)
    tk.argmax(x, out=o)
    tk.argmax(_rand((2, 50), 6, device), out=torch.zeros(2, dtype=torch.int32, device=device))
    raw = _rand((2, 50), 7, device)
    before = snapshot(raw)
    with pytest.raises(ts.AliasError) as e:
        tk.argmax(raw, out=raw.view(torch.int32)[0, :2])  # argmax-alias-call
    assert e.value.message == "argmax: `out` shares memory with the input `x`"
    assert_located(e.value, HERE, "argmax-alias-call")
    assert_unchanged(before, raw)


def test_a_lent_input_in_a_seen_layout_is_refused(backend, device):
    w = ts.tensor(_rand((32,), 1, device))
    x = ts.tensor(_rand((2, 32), 2, device))
    tk.rms_norm(x, w)
    tk.rms_norm(x, w)                                             # planned
    lent = x.partition((1, 32))  # plan-lent-here
    with pytest.raises(ts.OwnershipError) as e:
        tk.rms_norm(x, w)  # plan-lent-call
    assert e.value.message == (f"cannot use `dtype`: this tensor is lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'plan-lent-here')})")
    assert_located(e.value, HERE, "plan-lent-call")
    lent.unpartition()
    torch.testing.assert_close(tk.rms_norm(x, w).to_torch(), _rms(x.to_torch(copy=True), w.to_torch(copy=True)),
                               rtol=2e-4, atol=2e-5)


def test_an_unwritten_input_in_a_seen_layout_is_refused(backend, device):
    w = ts.tensor(_rand((16,), 1, device))
    pos = ts.tensor(torch.tensor([1, 2], dtype=torch.int32, device=device))
    out = ts.full((2, 4, 16), 3.0, device=device)
    for seed in range(2):
        tk.rope(ts.tensor(_rand((2, 4, 16), seed, device)), pos, out=out)   # planned
    u = ts.empty((2, 4, 16), device=device)
    out.copy_(ts.full((2, 4, 16), 3.0, device=device))
    with pytest.raises(ts.OwnershipError) as e:
        tk.rope(u, pos, out=out)  # plan-unwritten-call
    assert "is read, but it came from ts.empty and has not been written" in e.value.message
    assert_located(e.value, HERE, "plan-unwritten-call")
    assert (out.numpy() == 3.0).all()
    _ = w


def test_a_torch_version_counter_decides_between_two_calls_of_one_layout(backend, device):
    w = _rand((32,), 1, device)
    for seed in range(2):
        tk.rms_norm(_rand((2, 32), seed, device), w)              # the layout is seen, and planned
    handed = ts.empty((2, 32), device=device).to_torch()          # unwritten memory handed to torch
    with pytest.raises(ts.OwnershipError) as e:
        tk.rms_norm(handed, w)  # plan-handed-call
    assert "came from ts.empty and has not been written" in e.value.message
    assert_located(e.value, HERE, "plan-handed-call")
    handed.fill_(0.5)                                             # torch writes it: its counter moves
    torch.testing.assert_close(tk.rms_norm(handed, w), _rms(handed, w), rtol=2e-4, atol=2e-5)


def test_packed_views_of_one_tensor_and_views_of_two_are_separate_plans(backend, device):
    """Two arguments in one storage at some distance are another layout than two storages:
    the views a plan rebuilds from its first root would otherwise land in the wrong tensor."""
    w = _rand((32,), 1, device)
    for seed in range(3):                                         # each form again: its plan
        a, b = _rand((2, 32), seed, device), _rand((2, 32), seed + 5, device)
        both = torch.stack([a, b])                                # (2, 2, 32): x and residual in one storage
        y, h = tk.rms_norm(both[0], w, residual=both[1])
        torch.testing.assert_close(h, a + b)
        torch.testing.assert_close(y, _rms(a + b, w), rtol=2e-4, atol=2e-5)
        y, h = tk.rms_norm(b, w, residual=a.clone())             # the same shapes and strides, two storages
        torch.testing.assert_close(y, _rms(a + b, w), rtol=2e-4, atol=2e-5)
        y, h = tk.rms_norm(both[1], w, residual=both[0])          # one storage, the other way round
        torch.testing.assert_close(y, _rms(a + b, w), rtol=2e-4, atol=2e-5)


def test_decode_with_an_int_length_takes_the_full_path_each_time(backend, device):
    q, k, v = _rand((4, 16), 1, device), _rand((2, 8, 16), 2, device), _rand((2, 8, 16), 3, device)
    for n in (3, 5, 3):
        torch.testing.assert_close(tk.decode_attention(q, k, v, n), _decode(q, k, v, n), rtol=2e-4, atol=2e-5)


def test_a_view_at_another_alignment_is_another_launch_layout(backend, device, binds):
    """A plan's launches reuse the launch cache's verdicts for their layout; 16-byte alignment
    is part of that layout (the GPU code may assume it), so a view 4 bytes further is checked
    and specialized in full, not launched on the aligned verdicts."""
    w = _rand((32,), 1, device)
    base = _rand((65,), 2, device)
    assert base.data_ptr() % 16 == 0
    for _ in range(3):                                            # record, redo, redo on the kept verdicts
        torch.testing.assert_close(tk.rms_norm(base[0:64].view(2, 32), w), _rms(base[0:64].view(2, 32), w),
                                   rtol=2e-4, atol=2e-5)
    seen = binds[0]
    shifted = base[1:65].view(2, 32)
    torch.testing.assert_close(tk.rms_norm(shifted, w), _rms(shifted, w), rtol=2e-4, atol=2e-5)
    assert binds[0] == seen + 1


def test_a_dtype_argument_is_part_of_the_layout_not_a_reason_for_the_full_path(backend, device, lookups):
    a, b = _rand((20, 16), 1, device), _rand((16, 24), 2, device)
    for dtype in (ts.f32, ts.f16, ts.f32, ts.f16):                 # each out_dtype: its own plan
        got = tk.matmul(a, b, out_dtype=dtype)
        assert got.dtype == dtype.torch
        torch.testing.assert_close(got.float(), a @ b, rtol=2e-3, atol=2e-3)
    assert lookups[0] == 2                                        # the second call of each: its plan


def test_the_timed_runs_of_first_use_tuning_are_no_part_of_a_plan(monkeypatch, tmp_path):
    """A call that tunes on first use runs itself with each candidate config before its own
    launch: the plan of its layout, made by a later call, launches once, as the call does."""
    from test_config_model import _on_gpu
    from tilesafe.kernels import call_hits, call_plans, first_use
    from tilesafe.runtime.planned_launch import PlannedLaunch
    from tilesafe.settings import Settings
    _on_gpu(monkeypatch)
    monkeypatch.setattr(configs, "gpu_name", lambda: "plan-test-gpu")
    monkeypatch.setattr(first_use, "SETTINGS", Settings.from_env({"TILESAFE_CACHE_DIR": str(tmp_path)}))
    monkeypatch.setattr(first_use, "wanted", lambda: True)
    monkeypatch.setattr(first_use, "_time", lambda run, cand, timer: (run(cand), 1.0)[1])
    first_use.forget()
    launched = []
    real, real_hit, real_fast = call_plans.start, call_hits.start, PlannedLaunch.run
    monkeypatch.setattr(call_plans, "start", lambda kernel, *a, **k: (launched.append(kernel.name),
                                                                      real(kernel, *a, **k))[1])
    monkeypatch.setattr(call_hits, "start", lambda kernel, *a, **k: (launched.append(kernel.name),
                                                                     real_hit(kernel, *a, **k))[1])
    monkeypatch.setattr(PlannedLaunch, "run", lambda self, roots: (launched.append(self.kernel.name),
                                                                   real_fast(self, roots))[1])
    try:
        with ts.backend("reference"):
            for seed in range(4):                                 # tunes; records; then its plan twice
                x, w = _rand((12, 40), seed, "cpu"), _rand((24, 40), seed + 1, "cpu")
                out = torch.full((12, 24), float("nan"))
                torch.testing.assert_close(tk.linear(x, w, out=out), F.linear(x, w), rtol=1e-4, atol=1e-5)
        assert launched == ["skinny_kernel", "skinny_kernel"]     # the plan's calls: one launch each
    finally:
        first_use.forget()


def test_a_plan_key_tells_a_negative_zero_from_zero():
    # A plan replays the values its call recorded, and -0.0 == 0.0 in Python (with one hash):
    # keyed by equality, a call with -0.0 would run with 0.0 (x * -0.0 is -0.0, x / -0.0 -inf).
    from tilesafe.kernels.call_plans import call_key
    x = torch.ones(4)
    zero = call_key("f", (x, 0.0), {})[0]
    assert zero is not None and zero == call_key("f", (x, 0.0), {})[0]
    assert call_key("f", (x, -0.0), {})[0] != zero
    assert call_key("f", (x, 0), {})[0] != call_key("f", (x, False), {})[0]   # types apart, as before
