"""Elementwise kernels against torch in float64: broadcasting, scalars, strided views,
every unary op, torch and tilesafe tensors in, errors."""
import math

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn

BINARY = {"add": (tk.add, lambda x, y: x + y), "sub": (tk.sub, lambda x, y: x - y),
          "mul": (tk.mul, lambda x, y: x * y), "div": (tk.div, lambda x, y: x / y)}


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY = {"neg": (tk.neg, lambda x: -x), "exp": (tk.exp, torch.exp), "silu": (tk.silu, lambda x: x * torch.sigmoid(x)),
         "gelu": (tk.gelu, gelu_tanh), "relu": (tk.relu, torch.relu)}


def ref(fn, *xs):
    return fn(*(torch.as_tensor(f64(x)) if not isinstance(x, (int, float)) else x for x in xs))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_broadcasts_a_row_over_a_matrix(backend, device, op, dtype):
    x = randn((37, 50), dtype, 1, device)
    y = randn((50,), dtype, 2, device) + (3.0 if op == "div" else 0.0)
    out = poisoned((37, 50), dtype, device)
    got = BINARY[op][0](x, y, out=out)
    assert got is out
    assert_close(got, ref(BINARY[op][1], x, y), dtype)


@pytest.mark.parametrize("xs, ys", [((3, 1, 20), (4, 1)), ((5,), ()), ((2, 3, 4, 5), (3, 1, 5)), ((1, 7), (6, 1))])
def test_binary_numpy_broadcasting(backend, device, xs, ys):
    x, y = randn(xs, "f32", 3, device), randn(ys, "f32", 4, device)
    got = tk.mul(x, y)
    assert isinstance(got, torch.Tensor) and got.shape == torch.broadcast_shapes(xs, ys)
    assert_close(got, ref(lambda a, b: a * b, x, y), "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_python_scalar_operands(backend, device, dtype):
    x = randn((9, 33), dtype, 5, device)
    assert_close(tk.sub(2.5, x), ref(lambda a: 2.5 - a, x), dtype)
    assert_close(tk.div(x, 4.0), ref(lambda a: a / 4.0, x), dtype)
    assert_close(tk.div(3.0, x + 5.0), ref(lambda a: 3.0 / a, x + 5.0), dtype, rtol=2e-2)
    assert_close(tk.mul(x, 2), ref(lambda a: a * 2, x), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(backend, device, op, dtype):
    x = randn((3, 70), dtype, 6, device, scale=3.0)
    out = poisoned((3, 70), dtype, device)
    got = UNARY[op][0](x, out=out)
    assert_close(got, ref(UNARY[op][1], x), dtype)


def test_strided_inputs_and_output(backend, device):
    x = randn((40, 24), "f32", 7, device).T              # (24, 40), column-major
    y = randn((24, 80), "f32", 8, device)[:, ::2]         # (24, 40), every other column
    big = poisoned((24, 90), "f32", device)
    out = big[:, 5:45]                                     # a window of a wider buffer
    tk.add(x, y, out=out)
    assert_close(out, ref(lambda a, b: a + b, x, y), "f32")
    assert torch.isnan(big[:, :5]).all() and torch.isnan(big[:, 45:]).all()   # nothing else written


def test_residual_add_and_silu_mul_on_packed_views(backend, device):
    x, r = randn((6, 100), "f32", 9, device), randn((6, 100), "f32", 10, device)
    assert_close(tk.residual_add(x, r), ref(lambda a, b: a + b, x, r), "f32")
    gate_up = randn((6, 2, 100), "f32", 11, device)        # gate and up packed in one tensor
    gate, up = gate_up[:, 0], gate_up[:, 1]
    assert_close(tk.silu_mul(gate, up), ref(lambda g, u: g * torch.sigmoid(g) * u, gate, up), "f32")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_residual_add_half_precision_in_place(backend, device, dtype):
    h, r = randn((5, 300), dtype, 16, device), randn((5, 300), dtype, 17, device)
    want = ref(lambda a, b: a + b, h, r)
    assert tk.residual_add(h, r, out=h) is h
    assert_close(h, want, dtype)


def test_tilesafe_tensors_in_give_tilesafe_out(backend, device):
    x = ts.tensor(np.linspace(-2, 2, 300, dtype=np.float32).reshape(3, 100), device=device)
    y = ts.tensor(np.arange(100, dtype=np.float32), device=device)
    got = tk.add(x, y)
    assert isinstance(got, ts.Tensor) and got.shape == (3, 100)
    np.testing.assert_allclose(got.numpy(), x.numpy() + y.numpy(), rtol=1e-6)
    out = ts.empty((3, 100), device=device)
    assert tk.relu(x, out=out) is out
    np.testing.assert_array_equal(out.numpy(), np.maximum(x.numpy(), 0))   # fully written: readable


def test_empty_tensors(backend, device):
    x = torch.zeros((0, 5), device=device)
    assert tk.exp(x).shape == (0, 5)


@pytest.mark.reference_only
def test_errors_are_launch_errors_at_the_call(backend, device):
    x = randn((4, 5), "f32", 12, device)
    with pytest.raises(ts.LaunchError, match="do not broadcast") as e:
        tk.add(x, randn((3,), "f32", 13, device))
    assert e.value.loc.file == __file__
    with pytest.raises(ts.LaunchError, match="dtype f16 but `x` has f32"):
        tk.add(x, x.half())
    with pytest.raises(ts.LaunchError, match="takes f32, f16, bf16"):
        tk.exp(torch.arange(5, device=device))
    with pytest.raises(ts.LaunchError, match="takes equal shapes"):
        tk.residual_add(x, x[0])
    out = ts.empty((4, 6), device=device)
    with pytest.raises(ts.LaunchError, match="`out` has shape"):
        tk.exp(x, out=out)
    with pytest.raises(ts.LaunchError, match="must be a tilesafe or torch tensor"):
        tk.exp([1.0, 2.0])


@pytest.mark.reference_only
def test_a_refused_launch_leaves_out_usable(backend, device):
    x = ts.tensor(np.ones((4, 5), np.float32))
    out = ts.full((4, 5), 7.0)
    with pytest.raises(ts.TileSafeError):
        tk.add(x, x, out=out, config={"no_such_key": 1})
    assert out.numpy()[0, 0] == 7.0            # not lent to a dangling partition, not written


def test_in_place_updates(backend, device):
    h = randn((6, 100), "f32", 14, device)
    r = randn((6, 100), "f32", 15, device)
    want = ref(lambda a, b: a + b, h, r)
    assert tk.residual_add(h, r, out=h) is h                  # h += r: each block reads back its own tile
    assert_close(h, want, "f32")
    tk.mul(h, 0.5, out=h)
    tk.silu(h, out=h)
    assert_close(h, torch.nn.functional.silu(want * 0.5), "f32")
    with pytest.raises(ts.AliasError):                         # a partial overlap is a race: refused
        tk.add(h[:, 1:], r[:, 1:], out=h[:, :-1])
