"""`torch.ops.tilesafe.*`: the library's tensor-only calls as PyTorch custom operators.

Each op (functional and `_out` form) against a float64 torch oracle written here, with
torch's own schema and fake-tensor checks (`torch.library.opcheck`); a tiny model compiled
with `torch.compile(fullgraph=True)` under `torch.inference_mode()` against the same model
in eager torch. CI compiles with `backend="aot_eager"` (dynamo + AOT autograd's
functionalization of the `_out` forms, no C++ compile): Inductor takes about a minute per
model on the CI CPU and is what the GPU test (tests/gpu/test_torch_ops_gpu.py) uses.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels  # noqa: F401  (registers torch.ops.tilesafe)
from call_helpers import marker_line
from kernel_helpers import assert_close, poisoned, randn

ops = torch.ops.tilesafe


def _d(t):
    return t.detach().to(torch.float64)


def _rms(h, w, eps):
    return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos, theta):
    d = x.shape[-1] // 2
    angle = pos[:, None, None].double() * theta ** (-2 * torch.arange(d, dtype=torch.float64, device=x.device) / x.shape[-1])
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * torch.cos(angle) - x2 * torch.sin(angle), x2 * torch.cos(angle) + x1 * torch.sin(angle)], -1)


def _attend(q, k, v, causal=False):
    k, v = (t.repeat_interleave(q.shape[-3] // k.shape[-3], -3) for t in (k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, -1) @ v


def cases(device):
    """name -> (inputs, float64 oracle of the result(s)). Small shapes with ragged edges."""
    g = lambda shape, seed: randn(shape, "f32", seed, device)   # noqa: E731
    x, y, w, b = g((3, 40), 1), g((3, 40), 2), g((40,), 3), g((40,), 4)
    m, a3, b3 = g((40, 24), 5), g((2, 5, 40), 6), g((2, 40, 24), 7)
    q, k, v = g((1, 4, 9, 32), 8), g((1, 2, 9, 32), 9), g((1, 2, 9, 32), 10)
    qd, kc, vc = g((4, 32), 11), g((2, 20, 32), 12), g((2, 20, 32), 13)
    x3, table = g((5, 2, 32), 14), g((7, 40), 15)
    ids, pos, lens = (torch.tensor(v_, device=device) for v_ in ([[0, 6], [3, 1]], [0, 3, 1, 7, 2], [13]))
    X, Y, W = _d(x), _d(y), _d(w)
    return {
        "add": ((x, y), X + Y), "sub": ((x, y), X - Y), "mul": ((x, y), X * Y), "div": ((x, y), X / Y),
        "residual_add": ((x, y), X + Y), "silu_mul": ((x, y), F.silu(X) * Y),
        "neg": ((x,), -X), "exp": ((x,), X.exp()), "silu": ((x,), F.silu(X)),
        "gelu": ((x,), F.gelu(X, approximate="tanh")),
        "relu": ((x,), X.relu()),
        "sum": ((x, 0), X.sum(0)), "max": ((x,), X.amax(-1)), "mean": ((x, 1), X.mean(1)),
        "softmax": ((x,), X.softmax(-1)), "log_softmax": ((x, 0), X.log_softmax(0)),
        "rms_norm": ((x, w, 1e-5), _rms(X, W, 1e-5)),
        "add_rms_norm": ((x, y, w), (_rms(X + Y, W, 1e-6), X + Y)),
        "layer_norm": ((x, w, b), F.layer_norm(X, (40,), W, _d(b), 1e-5)),
        "matmul": ((x, m), X @ _d(m)), "linear": ((x, g((24, 40), 16)), X @ _d(g((24, 40), 16)).T),
        "bmm": ((a3, b3), _d(a3) @ _d(b3)),
        "flash_attention": ((q, k, v, True), _attend(_d(q), _d(k), _d(v), causal=True)),
        "decode_attention": ((qd, kc, vc, lens), _attend(_d(qd)[:, None], _d(kc)[:, :13], _d(vc)[:, :13])[:, 0]),
        "rope": ((x3, pos, 1e4), _rope(_d(x3), pos, 1e4)),
        "embedding": ((ids, table), _d(table)[ids]),
        "argmax": ((x, 0), X.argmax(0)),
    }


NAMES = list(cases("cpu"))


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)


@pytest.mark.parametrize("name", NAMES)
def test_each_op_and_its_out_form_match_torch(device, name):
    inputs, want = cases(device)[name]
    got = getattr(ops, name)(*inputs)
    for g_, w_ in zip(_tuple(got), _tuple(want), strict=True):
        assert g_.dtype == (torch.int32 if name == "argmax" else torch.float32)
        assert_close(g_, w_, "f32")
    outs = [poisoned(w_.shape, torch.int32 if name == "argmax" else "f32", device) for w_ in _tuple(want)]
    before = [o._version for o in outs]
    assert getattr(ops, f"{name}_out")(*outs, *inputs) is None
    for o, w_, v in zip(outs, _tuple(want), before):
        assert_close(o, w_, "f32")
        assert o._version > v          # written in place: autograd and torch.compile see it


@pytest.mark.reference_only
@pytest.mark.parametrize("name", NAMES)
def test_schemas_and_fake_shapes_pass_torchs_opcheck(device, name):
    """Functional forms mutate nothing and return fresh tensors; `_out` forms mutate exactly
    their outputs; every fake result has the real result's shape, strides and dtype."""
    inputs, want = cases(device)[name]
    checks = ("test_schema", "test_faketensor")
    torch.library.opcheck(getattr(ops, name).default, inputs, test_utils=checks)
    outs = [torch.empty(w_.shape, dtype=torch.int32 if name == "argmax" else torch.float32, device=device)
            for w_ in _tuple(want)]
    torch.library.opcheck(getattr(ops, f"{name}_out").default, (*outs, *inputs), test_utils=checks)


def test_add_rms_norm_inplace_updates_the_residual_stream(device):
    x, r, w = randn((3, 40), "f32", 1, device), randn((3, 40), "f32", 2, device), randn((40,), "f32", 3, device)
    h = _d(x) + _d(r)
    y, version = poisoned((3, 40), "f32", device), r._version
    ops.add_rms_norm_inplace(y, x, r, w, 1e-6)
    assert_close(r, h, "f32")
    assert_close(y, _rms(h, _d(w), 1e-6), "f32")
    assert r._version > version


def test_ops_run_on_inference_tensors(device):
    """Inference tensors have no version counter: the runtime reads theirs as 0
    (runtime/torch_version.py), and an `_out` form bumps none on an inference output."""
    with torch.inference_mode():
        x, w = randn((3, 40), "f32", 1, device), randn((40,), "f32", 2, device)
        got = ops.rms_norm(x, w)
        out = poisoned((3, 40), "f32", device)
        ops.silu_mul_out(out, x, x)
    assert_close(got, _rms(_d(x), _d(w), 1e-6), "f32")
    assert_close(out, F.silu(_d(x)) * _d(x), "f32")
    ops.add_out(out, x, w)              # inference tensors used after the mode ended
    assert_close(out, _d(x) + _d(w), "f32")


def test_a_refused_op_points_at_the_users_line(backend):
    x, w = randn((3, 40), "f32", 1), randn((24,), "f32", 2)
    with pytest.raises(ts.LaunchError) as e:
        ops.rms_norm(x, w)  # op: bad weight
    assert e.value.loc.file == __file__ and e.value.loc.line == marker_line(__file__, "op: bad weight")
    assert "`w`" in e.value.message and "src/tilesafe" not in str(e.value) and "Traceback" not in str(e.value)


@pytest.mark.reference_only
def test_a_refused_op_in_compiled_code_points_into_the_users_file(backend):
    """Inside a compiled graph the op's own line is gone (dynamo rewrote the function): the
    error points at the user's compiled function, not at torch's generated code."""
    def norm_twice(x, w):
        return ops.rms_norm(x, w) * 2

    compiled = torch.compile(norm_twice, fullgraph=True, backend="aot_eager")
    with torch.inference_mode(), pytest.raises(ts.LaunchError, match="`w` must have shape") as e:
        compiled(randn((3, 40), "f32", 1), randn((24,), "f32", 2))
    assert e.value.loc.file == __file__, e.value.loc
    assert "Traceback" not in str(e.value)


def test_an_op_refuses_inputs_autograd_tracks(backend):
    x = randn((3, 40), "f32", 1).requires_grad_(True)
    with pytest.raises(ts.LaunchError, match="`x` requires grad") as e:
        ops.exp(x)  # op: tracked input
    assert e.value.loc.line == marker_line(__file__, "op: tracked input")


class TinyLM(torch.nn.Module):
    """embedding -> fused add + rms_norm (residual updated in place) -> gate/up linear ->
    silu_mul -> down linear -> softmax and argmax: every shape on the Qwen3 path, tiny."""

    def __init__(self, vocab=50, hidden=32, inter=48, tilesafe=True):
        super().__init__()
        self.tilesafe = tilesafe
        g = torch.Generator().manual_seed(0)
        p = lambda *shape: torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.3)   # noqa: E731
        self.table, self.w_norm, self.w_up = p(vocab, hidden), p(hidden), p(2 * inter, hidden)
        self.w_down, self.head = p(hidden, inter), p(vocab, hidden)
        self.inter = inter

    def forward(self, ids, residual):
        if self.tilesafe:
            h = ops.embedding(ids, self.table)                          # (T, hidden)
            y = torch.empty_like(h)
            ops.add_rms_norm_inplace(y, h, residual, self.w_norm, 1e-6)  # residual += h; y = norm(residual)
            gu = ops.linear(y, self.w_up)                               # (T, 2 * inter)
            a = ops.silu_mul(gu[:, :self.inter], gu[:, self.inter:])    # (T, inter)
            logits = ops.linear(ops.linear(a, self.w_down), self.head)  # (T, vocab)
            return ops.softmax(logits, -1), ops.argmax(logits)
        h = F.embedding(ids, self.table)
        residual += h
        y = F.rms_norm(residual, (h.shape[-1],), self.w_norm, 1e-6)
        gu = F.linear(y, self.w_up)
        logits = F.linear(F.linear(F.silu(gu[:, :self.inter]) * gu[:, self.inter:], self.w_down), self.head)
        return logits.softmax(-1), logits.argmax(-1).to(torch.int32)


def test_a_model_compiles_fullgraph_under_inference_mode(device):
    graphs = []

    def recording(gm, example_inputs):      # dynamo hands the whole graph over: count our ops
        graphs.append(gm)
        from torch._dynamo.backends.common import aot_autograd
        return aot_autograd(fw_compiler=lambda g, _: g)(gm, example_inputs)

    model, ref = TinyLM().to(device), TinyLM(tilesafe=False).to(device)
    ids = torch.tensor([3, 17, 42, 0, 9], device=device)
    with torch.inference_mode():
        r0 = torch.randn(5, 32, generator=torch.Generator().manual_seed(1)).to(device)
        r_compiled, r_eager = r0.clone(), r0.clone()
        compiled = torch.compile(model, fullgraph=True, backend=recording)   # fullgraph: a break is an error
        probs, tokens = compiled(ids, r_compiled)
        want_probs, want_tokens = ref(ids, r_eager)
    assert len(graphs) == 1
    called = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert {f"tilesafe.{name}" for name in ("embedding", "add_rms_norm_inplace", "linear", "silu_mul", "softmax",
                                            "argmax")} <= called, called
    assert_close(probs, want_probs, "f32", rtol=1e-4, atol=1e-6)
    assert torch.equal(tokens, want_tokens)
    assert_close(r_compiled, r_eager, "f32")      # the in-place residual update survives functionalization


def test_import_registers_the_ops_without_loading_the_compiler():
    """`import tilesafe.kernels` makes torch.ops.tilesafe.* callable and stays cheap: it
    pulls in neither dynamo nor inductor (torch.compile loads them when a user compiles)."""
    import subprocess
    import sys
    code = ("import sys, torch, tilesafe.kernels\n"
            "assert callable(torch.ops.tilesafe.rms_norm) and callable(torch.ops.tilesafe.rms_norm_out)\n"
            "assert not any(m.startswith(('torch._dynamo', 'torch._inductor')) for m in sys.modules), "
            "[m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
