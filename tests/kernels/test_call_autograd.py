"""Library calls refuse torch inputs that autograd tracks (their results would silently have
no gradient) while grad mode is on, naming the argument at the user's call; under
`torch.no_grad()` / `torch.inference_mode()`, or with `.detach()`, they run."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import marker_line
from kernel_helpers import assert_close, f64, randn


def tensors(device) -> dict:
    g = lambda shape, seed: randn(shape, "f32", seed, device)   # noqa: E731
    return dict(x=g((4, 32), 1), y=g((4, 32), 2), w=g((32,), 3), b=g((32,), 4), m=g((32, 16), 5),
                a3=g((2, 16, 32), 6), q=g((2, 16, 32), 7), k=g((2, 16, 32), 8), v=g((2, 16, 32), 9),
                qd=g((4, 32), 10), kc=g((2, 20, 32), 11), vc=g((2, 20, 32), 12), x3=g((4, 2, 32), 13),
                table=g((5, 32), 14), out=g((4, 32), 15), ids=torch.tensor([0, 3, 1], device=device),
                pos=torch.arange(4, device=device))


# (the tensor that requires grad, the argument name the error gives, the call); one call per line.
CALLS = [
    ("x", "x", lambda t: tk.add(t["x"], t["y"])),
    ("y", "y", lambda t: tk.add(t["x"], t["y"])),
    ("y", "up", lambda t: tk.silu_mul(t["x"], t["y"])),
    ("y", "r", lambda t: tk.residual_add(t["x"], t["y"])),
    ("x", "x", lambda t: tk.exp(t["x"])),
    ("x", "y", lambda t: tk.mul(2.0, t["x"])),           # the second operand: `y`
    ("out", "out", lambda t: tk.add(t["x"], t["y"], out=t["out"])),
    ("x", "x", lambda t: tk.sum(t["x"], dim=0)),
    ("x", "x", lambda t: tk.softmax(t["x"], dim=-1)),
    ("w", "w", lambda t: tk.rms_norm(t["x"], t["w"])),
    ("y", "residual", lambda t: tk.rms_norm(t["x"], t["w"], residual=t["y"])),
    ("b", "b", lambda t: tk.layer_norm(t["x"], t["w"], t["b"])),
    ("m", "b", lambda t: tk.matmul(t["x"], t["m"])),
    ("b", "bias", lambda t: tk.linear(t["x"], t["y"], bias=t["b"][:4])),
    ("a3", "a", lambda t: tk.bmm(t["a3"], t["m"])),
    ("v", "v", lambda t: tk.flash_attention(t["q"], t["k"], t["v"])),
    ("kc", "k_cache", lambda t: tk.decode_attention(t["qd"], t["kc"], t["vc"], 7)),
    ("x3", "x", lambda t: tk.rope(t["x3"], t["pos"])),
    ("table", "table", lambda t: tk.embedding(t["ids"], t["table"])),
]
IDS = [f"{c.__code__.co_firstlineno}-{name}" for _, name, c in CALLS]


@pytest.mark.parametrize("key, name, call", CALLS, ids=IDS)
def test_an_input_autograd_tracks_is_refused_at_the_call(backend, device, key, name, call):
    t = tensors(device)
    t[key].requires_grad_(True)
    with pytest.raises(ts.LaunchError) as e:
        call(t)
    err = e.value
    assert f"`{name}` requires grad" in err.message and "no gradients" in err.message, str(err)
    assert "torch.no_grad()" in err.help and "inference_mode()" in err.help and f"{name}.detach()" in err.help
    assert err.loc is not None and err.loc.file == __file__ and err.loc.line == call.__code__.co_firstlineno, str(err)
    assert "src/tilesafe" not in str(err) and "Traceback" not in str(err)


@pytest.mark.parametrize("key, name, call", CALLS, ids=IDS)
def test_without_grad_mode_the_same_calls_run(backend, device, key, name, call):
    t = tensors(device)
    t[key].requires_grad_(True)
    with torch.no_grad():
        first = call(t)
    t[key] = t[key].detach()
    second = call(t)
    for a, b in zip(*(r if isinstance(r, tuple) else (r,) for r in (first, second))):
        assert a.grad_fn is None and torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_under_inference_mode_a_call_runs(backend, device):
    x = randn((4, 32), "f32", 23, device).requires_grad_(True)
    with torch.inference_mode():
        got = tk.exp(x)
    assert_close(got, torch.exp(torch.as_tensor(f64(x))), "f32")


def test_inference_tensors_in_and_out(backend, device):
    # Inference tensors have no version counter (reading it raises): the runtime's S13/S14
    # checks must not trip over them, inside inference mode or after it.
    with torch.inference_mode():
        x = randn((4, 32), "f32", 24, device)
        w = randn((32,), "f32", 25, device)
        out = torch.full((4, 32), float("nan"), device=device)
        tk.rms_norm(x, w, out=out)
        inside = tk.add(x, x)
    xx, ww = torch.as_tensor(f64(x)), torch.as_tensor(f64(w))
    assert_close(out, xx * torch.rsqrt((xx * xx).mean(-1, keepdim=True) + 1e-6) * ww, "f32")
    assert_close(inside, 2 * xx, "f32")
    assert_close(tk.add(x, out), xx + torch.as_tensor(f64(out)), "f32")   # after inference mode too


def test_results_under_no_grad_and_detached_inputs(backend, device):
    w = torch.nn.Parameter(randn((32,), "f32", 20, device))     # a module's weight: requires grad
    x = randn((4, 32), "f32", 21, device)
    xx, ww = torch.as_tensor(f64(x)), torch.as_tensor(f64(w))
    want = xx * torch.rsqrt((xx * xx).mean(-1, keepdim=True) + 1e-6) * ww
    with torch.no_grad():
        assert_close(tk.rms_norm(x, w), want, "f32")
    assert_close(tk.rms_norm(x, w.detach()), want, "f32")
    with pytest.raises(ts.LaunchError, match="`w` requires grad") as e:
        tk.rms_norm(x, w)  # call: parameter
    assert e.value.loc.line == marker_line(__file__, "call: parameter")


def test_argmax_has_no_gradient_to_drop(backend, device):
    x = randn((3, 50), "f32", 22, device).requires_grad_(True)
    got = tk.argmax(x)                                           # as torch.argmax: fine under grad mode
    assert torch.equal(got.long(), torch.argmax(x.detach(), dim=-1))
