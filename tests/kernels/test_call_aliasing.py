"""A library call's outputs are checked against its inputs and each other as a whole, by the
caller's argument names, before its first launch: a refused call writes nothing (every
argument's bytes are compared before and after). Elementwise calls accept `out=` equal to
an operand (the very same view), also to both of them; any partial overlap stays refused."""
import math

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_at_call, assert_unchanged, snapshot
from kernel_helpers import assert_close, f64, randn

HERE = __file__


def ref(fn, *xs):
    return fn(*(torch.as_tensor(f64(x)) if isinstance(x, torch.Tensor) else x for x in xs))


def silu(a):
    return a * torch.sigmoid(a)


# --- in place: `out=` an operand itself ------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_out_may_be_the_second_operand_or_both(backend, device, dtype):
    x, y = randn((5, 70), dtype, 1, device), randn((5, 70), dtype, 2, device) + 4.0
    row = randn((70,), dtype, 3, device)
    cases = [   # (call writing into `t`, oracle on the original values)
        (lambda t: tk.add(t, t, out=t), lambda a: a + a, x),
        (lambda t: tk.mul(t, t, out=t), lambda a: a * a, x),
        (lambda t: tk.sub(x, t, out=t), lambda a: ref(lambda p, q: p - q, x, a), y),
        (lambda t: tk.div(x, t, out=t), lambda a: ref(lambda p, q: p / q, x, a), y),
        (lambda t: tk.silu_mul(x, t, out=t), lambda a: ref(lambda g, u: silu(g) * u, x, a), y),
        (lambda t: tk.silu_mul(t, y, out=t), lambda a: ref(lambda g, u: silu(g) * u, a, y), x),
        (lambda t: tk.residual_add(x, t, out=t), lambda a: ref(lambda p, q: p + q, x, a), y),
        (lambda t: tk.sub(row, t, out=t), lambda a: ref(lambda p, q: p - q, row, a), y),   # broadcast operand
        (lambda t: tk.sub(2.0, t, out=t), lambda a: 2.0 - a, y),
    ]
    for i, (call, oracle, start) in enumerate(cases):
        t = start.clone()
        want = oracle(torch.as_tensor(f64(start)))
        assert call(t) is t, i
        assert_close(t, want, dtype)


def test_in_place_on_tilesafe_tensors(backend, device):
    host = np.linspace(-2.0, 3.0, 6 * 40, dtype=np.float32).reshape(6, 40)
    t = ts.tensor(host, device=device)
    assert tk.add(t, t, out=t) is t
    assert tk.sub(1.5, t, out=t) is t
    np.testing.assert_allclose(t.numpy(), 1.5 - 2 * host, rtol=1e-6)


def test_in_place_over_several_slab_launches(backend, device):
    base = randn((5, 4, 8, 8), "f32", 4, device)
    x = base[:4, :3, :4, :5]                       # four axes that do not merge: one launch per slab
    want = ref(torch.exp, x)
    assert tk.exp(x, out=x) is x
    assert_close(x, want, "f32")
    y = randn((4, 3, 4, 5), "f32", 5, device)
    want = ref(lambda p, q: p * q, y, x)
    tk.mul(y, x, out=x)
    assert_close(x, want, "f32")


# --- partial overlaps: refused, by the caller's names, before anything runs -----------------------


def test_a_shifted_out_is_refused_naming_the_callers_argument(backend, device):
    buf, packed = randn((6, 65), "f32", 6, device), randn((4, 128), "f32", 7, device)
    before = snapshot(buf, packed)
    with pytest.raises(ts.AliasError) as e:
        tk.sub(buf[:, 1:], buf[:, 1:], out=buf[:, :-1])  # call: shifted
    assert_at_call(e.value, HERE, "call: shifted", "sub: `out` shares memory with the input `x`")
    assert "the very same view" in e.value.help
    with pytest.raises(ts.AliasError) as e:
        tk.silu_mul(packed[:, :64], packed[:, 64:], out=packed[:, 1:65])  # call: packed
    assert_unchanged(before, buf, packed)
    assert_at_call(e.value, HERE, "call: packed", "silu_mul: `out` shares memory with the input `gate`")


def test_out_on_the_same_bytes_through_other_strides_is_refused(backend, device):
    x, y = randn((32, 32), "f32", 8, device), randn((32, 32), "f32", 9, device)
    before = snapshot(x, y)
    with pytest.raises(ts.AliasError) as e:
        tk.add(x, y, out=x.T)  # call: transposed
    assert_unchanged(before, x, y)
    assert_at_call(e.value, HERE, "call: transposed", "add: `out` shares memory with the input `x`")


def test_a_shifted_out_over_several_slab_launches_is_refused(backend, device):
    # Slab i of `out` is slab i + 1 of x: no single launch sees an overlap, the call does.
    base = randn((5, 4, 8, 8), "f32", 10, device)
    before = snapshot(base)
    with pytest.raises(ts.AliasError) as e:
        tk.exp(base[:4, :3, :4, :5], out=base[1:, :3, :4, :5])  # call: slabs
    assert_unchanged(before, base)
    assert_at_call(e.value, HERE, "call: slabs", "exp: `out` shares memory with the input `x`")


def test_out_overlapping_itself_is_refused(backend, device):
    x = randn((4, 16), "f32", 11, device)
    out = torch.zeros(16, device=device).expand(4, 16)
    with pytest.raises(ts.AliasError) as e:
        tk.exp(x, out=out)  # call: stride zero
    assert_at_call(e.value, HERE, "call: stride zero", "exp: `out` overlaps itself")
    assert not out.any()


def test_non_elementwise_calls_refuse_out_equal_to_an_input(backend, device):
    x, w = randn((4, 64), "f32", 12, device), randn((64,), "f32", 13, device)
    q = randn((2, 16, 32), "f32", 14, device)
    a3 = randn((2, 32, 32), "f32", 15, device)
    pos = torch.arange(16, device=device)
    before = snapshot(x, w, q, a3)
    with pytest.raises(ts.AliasError) as e:
        tk.layer_norm(x, w, out=x)  # call: layer_norm
    assert_at_call(e.value, HERE, "call: layer_norm", "layer_norm: `out` shares memory with the input `x`")
    with pytest.raises(ts.AliasError) as e:
        tk.softmax(x, out=x)  # call: softmax
    assert_at_call(e.value, HERE, "call: softmax", "softmax: `out` shares memory with the input `x`")
    with pytest.raises(ts.AliasError) as e:
        tk.rope(q.transpose(0, 1), pos, out=q.transpose(0, 1))  # call: rope
    assert_at_call(e.value, HERE, "call: rope", "rope: `out` shares memory with the input `x`")
    with pytest.raises(ts.AliasError) as e:
        tk.bmm(a3, a3[0], out=a3)  # call: bmm
    assert_at_call(e.value, HERE, "call: bmm", "bmm: `out` shares memory with the input `a`")
    with pytest.raises(ts.AliasError) as e:
        tk.linear(x[:, :16], x[:, 16:32], out=x[:, 20:24])  # call: linear
    assert_unchanged(before, x, w, q, a3)
    assert_at_call(e.value, HERE, "call: linear", "linear: `out` shares memory with the input `w`")


# --- calls of several launches: refused before the first -----------------------------------------


def test_rms_norm_out_and_residual_out_in_one_buffer(backend, device):
    x, r, w = randn((4, 48), "f32", 16, device), randn((4, 48), "f32", 17, device), randn((48,), "f32", 18, device)
    buf = randn((4, 48), "f32", 19, device)
    before = snapshot(x, r, w, buf)
    with pytest.raises(ts.AliasError) as e:
        tk.rms_norm(x, w, residual=r, out=buf, residual_out=buf)  # call: one buffer
    assert_unchanged(before, x, r, w, buf)
    assert_at_call(e.value, HERE, "call: one buffer", "rms_norm: `out` and `residual_out` share memory")


LONG_ROWS = {"row_max": 32, "sub": 32}      # rows of 96 take the two-launch path: the add, then the norm


def test_rms_norm_long_rows_residual_out_over_the_weight(backend, device):
    # residual_out's first row is the weight: the first launch would write it, the second read it.
    x, r = randn((4, 96), "f32", 20, device), randn((4, 96), "f32", 21, device)
    buf = randn((5, 96), "f32", 22, device)
    before = snapshot(x, r, buf)
    with pytest.raises(ts.AliasError) as e:
        tk.rms_norm(x, buf[0], residual=r, residual_out=buf[:4], config=LONG_ROWS)  # call: over weight
    assert_unchanged(before, x, r, buf)
    assert_at_call(e.value, HERE, "call: over weight", "rms_norm: `residual_out` shares memory with the input `w`")


def test_rms_norm_long_rows_out_overlapping_residual_out(backend, device):
    x, r, w = randn((4, 96), "f32", 23, device), randn((4, 96), "f32", 24, device), randn((96,), "f32", 25, device)
    buf = randn((5, 96), "f32", 26, device)
    before = snapshot(x, r, w, buf)
    with pytest.raises(ts.AliasError) as e:
        tk.rms_norm(x, w, residual=r, out=buf[1:], residual_out=buf[:4], config=LONG_ROWS)  # call: long rows
    assert_unchanged(before, x, r, w, buf)
    assert_at_call(e.value, HERE, "call: long rows", "rms_norm: `out` and `residual_out` share memory")


def test_rms_norm_long_rows_in_place_residual_still_works(backend, device):
    x, r, w = randn((4, 96), "f32", 27, device), randn((4, 96), "f32", 28, device), randn((96,), "f32", 29, device)
    h = ref(lambda p, q: p + q, x, r)
    want = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-6) * torch.as_tensor(f64(w))
    y, got_h = tk.rms_norm(x, w, residual=r, residual_out=r, config=LONG_ROWS)
    assert got_h is r
    assert_close(r, h, "f32")
    assert_close(y, want, "f32")


DECODE = {"one_kernel": False, "splits": 2}   # the partials, then their combination: two launches


def _decode_workspace(q, kc, device, config):
    """A workspace of torch tensors full of marker values, its tilesafe view, and the tensors."""
    shapes = tk.decode_workspace(q, kc, config=config)
    parts = [randn(t.shape, "f32", 30 + i, device) for i, t in enumerate((shapes.acc, shapes.m, shapes.l))]
    return tk.DecodeWorkspace(*(ts.from_torch(p) for p in parts)), parts


def test_decode_out_inside_its_workspace(backend, device):
    q = randn((4, 32), "f32", 33, device)
    kc, vc = randn((2, 40, 32), "f32", 34, device), randn((2, 40, 32), "f32", 35, device)
    ws, parts = _decode_workspace(q, kc, device, DECODE)
    out = parts[0][0, :4, :]                                     # (4, 32) inside workspace.acc
    before = snapshot(q, kc, vc, *parts)
    with pytest.raises(ts.AliasError) as e:
        tk.decode_attention(q, kc, vc, 30, out=out, workspace=ws, config=DECODE)  # call: decode
    assert_unchanged(before, q, kc, vc, *parts)
    assert_at_call(e.value, HERE, "call: decode", "decode_attention: `out` and `workspace.acc` share memory")


def test_decode_seq_len_inside_the_workspace(backend, device):
    q = randn((4, 32), "f32", 36, device)
    kc, vc = randn((2, 40, 32), "f32", 37, device), randn((2, 40, 32), "f32", 38, device)
    ws, parts = _decode_workspace(q, kc, device, DECODE)
    length = parts[2].view(torch.int32).view(-1)[:1]             # the length's bytes are workspace.l's
    length.fill_(30)
    before = snapshot(q, kc, vc, *parts)
    with pytest.raises(ts.AliasError) as e:
        tk.decode_attention(q, kc, vc, length, workspace=ws, config=DECODE)  # call: length
    assert_unchanged(before, q, kc, vc, *parts)
    assert_at_call(e.value, HERE, "call: length", "decode_attention: `workspace.l` shares memory with the input "
                                                   "`seq_len`")


def test_argmax_out_inside_its_workspace(backend, device):
    x = randn((3, 200), "f32", 39, device)
    shapes = tk.argmax_workspace(x)
    best = randn(shapes.best.shape, "f32", 40, device)
    at = torch.arange(math.prod(shapes.at.shape), dtype=torch.int32, device=device).view(shapes.at.shape)
    ws = tk.ArgmaxWorkspace(ts.from_torch(best), ts.from_torch(at))
    before = snapshot(x, best, at)
    with pytest.raises(ts.AliasError) as e:
        tk.argmax(x, out=at[:, 0], workspace=ws)  # call: argmax
    assert_unchanged(before, x, best, at)
    assert_at_call(e.value, HERE, "call: argmax", "argmax: `out` and `workspace.at` share memory")


def test_split_k_matmul_out_over_its_input(backend, device):
    # Split-K runs the partial products, then their sum into `out`: the sum never sees `a`.
    a, b = randn((20, 64), "f32", 41, device), randn((64, 64), "f32", 42, device)
    before = snapshot(a, b)
    with pytest.raises(ts.AliasError) as e:
        tk.matmul(a, b, out=a, config={"split_k": 2})  # call: split-k
    assert_unchanged(before, a, b)
    assert_at_call(e.value, HERE, "call: split-k", "matmul: `out` shares memory with the input `a`")
