"""The decode step's fused GEMVs against torch in float64: the RMSNorm and SiLU-mul prologues
(`rms_norm_linear`, `silu_mul_linear`), the residual epilogue (`linear(residual=)`, in place
with out=residual), and the greedy LM head `linear_argmax` (ids and log-probabilities, ties
to the lowest index). The oracles round where the unfused sequence stores (the normed rows,
silu(gate) * up, the product before the residual add)."""
import os

import pytest
import torch
from call_helpers import assert_at_call, assert_unchanged, snapshot
from kernel_helpers import DTYPES, assert_close, f64, poisoned, randn

import tilesafe as ts
import tilesafe.kernels as tk

HERE = os.path.abspath(__file__)
F = torch.nn.functional
TOL = {"f32": dict(rtol=1e-4, atol=1e-4), "f16": dict(rtol=1e-2, atol=3e-2), "bf16": dict(rtol=2e-2, atol=8e-2)}
# K = 150, N = 70: ragged against every tile; M = 1 (FMAs), 5 (tensor cores), 20 (> 16: the unfused sequence)
K, N = 150, 70


def t64(x):
    return torch.as_tensor(f64(x))


def rounded(t, dtype):
    """A float64 tensor rounded to `dtype` and back: what a kernel stores between two steps."""
    return t.to(DTYPES[dtype]).to(torch.float64)


def norm_oracle(x, g, eps, dtype):
    x = t64(x)
    return rounded(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * t64(g), dtype)


def late_norm_linear(x, g, w, eps, dtype):
    """linear(rms_norm(x, g), w) as the one-launch fused GEMV computes it (NORM_LATE): the
    tile x * g rounded to dtype, the product scaled by each row's 1 / rms (float64)."""
    x = t64(x)
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return F.linear(rounded(x * t64(g), dtype), t64(w)) * r


def one_launch_norm_linear(x, g, w, eps, dtype):
    """The one-launch GEMV's oracle: late normalisation, but f16 normalises first (x * g could
    pass f16's range), as the unfused sequence does."""
    if dtype == "f16":
        return F.linear(norm_oracle(x, g, eps, dtype), t64(w))
    return late_norm_linear(x, g, w, eps, dtype)


def fused_norm_linear(x, g, w, eps, dtype, m):
    """The fused call's oracle: one launch up to 16 rows, the unfused sequence above."""
    return one_launch_norm_linear(x, g, w, eps, dtype) if m <= 16 else F.linear(norm_oracle(x, g, eps, dtype), t64(w))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m", [1, 5, 20])
def test_rms_norm_linear(backend, device, m, dtype):
    x, w = randn((m, K), dtype, 1, device), randn((N, K), dtype, 2, device, scale=0.2)
    g = randn((K,), dtype, 3, device)
    out = poisoned((m, N), dtype, device)
    got = tk.rms_norm_linear(x, g, w, eps=1e-5, out=out)
    assert got is out
    assert_close(got, fused_norm_linear(x, g, w, 1e-5, dtype, m), dtype, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["bf16"])      # (not on Triton's interpreter: bf16 is wrong there)
@pytest.mark.parametrize("m", [1, 5])
def test_the_one_launch_norm_scales_the_product_once(backend, device, m, dtype):
    """The one-launch GEMV rounds x * g and scales the product by 1 / rms (NORM_LATE), with no
    pass over x before its loop: in bf16 its outputs are the late oracle's rounded values,
    which differ from the unfused sequence's where its rounding of x / rms * g lands elsewhere."""
    x, w = randn((m, K), dtype, 80, device, scale=3.0), randn((N, K), dtype, 81, device, scale=0.2)
    g = randn((K,), dtype, 82, device)
    got = torch.as_tensor(f64(tk.rms_norm_linear(x, g, w, config={"split_k": 1})))   # one launch on any GPU
    late = rounded(late_norm_linear(x, g, w, 1e-6, dtype), dtype)
    unfused = rounded(F.linear(norm_oracle(x, g, 1e-6, dtype), t64(w)), dtype)
    assert (late != unfused).sum() > 10 * m                            # the two roundings are told apart
    assert (got != late).sum() <= 2 and (got - late).abs().max() <= 2 ** -7 * late.abs().max()   # fp32 sums


@pytest.mark.parametrize("m", [1, 5])
def test_f16_rows_too_large_for_x_times_g_are_normalised_first(backend, device, m):
    """In f16, x * g of a large row (|x| ~ 3000, g ~ 40: 1.2e5) is past f16's 65504, while the
    normed row x / rms * g is not: f16 keeps the pass before the loop (NORM), whose tile is
    the unfused sequence's, so the fused call is finite and equals the unfused oracle."""
    x = randn((m, K), "f16", 87, device, scale=3000.0)
    w, g = randn((N, K), "f16", 88, device, scale=0.2), randn((K,), "f16", 89, device, scale=40.0)
    got = tk.rms_norm_linear(x, g, w, config={"split_k": 1}, out=poisoned((m, N), "f16", device))
    assert torch.isfinite(torch.as_tensor(f64(got))).all()
    assert_close(got, F.linear(norm_oracle(x, g, 1e-6, "f16"), t64(w)), "f16", **TOL["f16"])
    ids, _ = tk.linear_argmax(x, w, norm_weight=g)
    assert torch.equal(torch.as_tensor(ids).long().cpu(), F.linear(norm_oracle(x, g, 1e-6, "f16"), t64(w)).argmax(-1))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])       # f16: the norm first (NORM), in the same loop
def test_the_prefetching_gemv_sums_each_k_tile_once_for_the_late_norm(backend, device, dtype):
    """One row with `prefetch`: tile k + 1 is loaded before tile k's FMAs and the last tile is
    loaded twice, while the squares of each of the 5 K tiles (the last ragged) count once."""
    x, w = randn((1, K), dtype, 83, device), randn((N, K), dtype, 84, device, scale=0.2)
    g = randn((K,), dtype, 85, device)
    cfg = {"split_k": 1, "prefetch": True, "block_n": 32, "block_k": 32}
    got = tk.rms_norm_linear(x, g, w, eps=1e-5, out=poisoned((1, N), dtype, device), config=cfg)
    assert_close(got, one_launch_norm_linear(x, g, w, 1e-5, dtype), dtype, **TOL[dtype])
    gu = randn((1, 2 * K), dtype, 86, device)
    act = rounded(F.silu(t64(gu)[:, :K]) * t64(gu)[:, K:], dtype)
    got = tk.silu_mul_linear(gu, w, out=poisoned((1, N), dtype, device), config=cfg)
    assert_close(got, F.linear(act, t64(w)), dtype, **TOL[dtype])


@pytest.mark.parametrize("m, splits", [(1, 2), (5, 5)])
def test_the_norm_prologue_under_split_k(backend, device, m, splits):
    """Every K slice scales by the whole row's statistics (5 K tiles of 32 in 2 or 5 splits)."""
    x, w, g = randn((m, K), "f32", 4, device), randn((N, K), "f32", 5, device), randn((K,), "f32", 6, device)
    got = tk.rms_norm_linear(x, g, w, out=poisoned((m, N), "f32", device), config={"split_k": splits})
    assert_close(got, F.linear(norm_oracle(x, g, 1e-6, "f32"), t64(w)), "f32", **TOL["f32"])


@pytest.mark.parametrize("dtype, m", [("f32", 1), ("f32", 5), ("f32", 20), ("f16", 1), ("f16", 5), ("bf16", 1),
                                      ("bf16", 5)])
def test_silu_mul_linear_adds_the_residual_in_place(backend, device, m, dtype):
    gu, w = randn((m, 2 * K), dtype, 7, device), randn((N, K), dtype, 8, device, scale=0.2)
    res = randn((m, N), dtype, 9, device)
    act = rounded(F.silu(t64(gu)[:, :K]) * t64(gu)[:, K:], dtype)
    want = rounded(F.linear(act, t64(w)), dtype) + t64(res)
    fresh = tk.silu_mul_linear(gu, w, residual=res, out=poisoned((m, N), dtype, device))
    assert_close(fresh, want, dtype, **TOL[dtype])
    got = tk.silu_mul_linear(gu, w, residual=res, out=res)             # residual += mlp
    assert got is res
    assert_close(res, want, dtype, **TOL[dtype])
    plain = tk.silu_mul_linear(gu, w)                                   # no residual, allocated
    assert_close(plain, F.linear(act, t64(w)), dtype, **TOL[dtype])


@pytest.mark.parametrize("m", [1, 5])
def test_the_residual_epilogue_after_split_k(backend, device, m):
    gu, w = randn((m, 2 * K), "f32", 10, device), randn((N, K), "f32", 11, device)
    res = randn((m, N), "f32", 12, device)
    want = F.linear(F.silu(t64(gu)[:, :K]) * t64(gu)[:, K:], t64(w)) + t64(res)
    tk.silu_mul_linear(gu, w, residual=res, out=res, config={"split_k": 3})
    assert_close(res, want, "f32", **TOL["f32"])


@pytest.mark.parametrize("dtype, m", [("f32", 1), ("f32", 20), ("f16", 5)])
def test_linear_with_residual_bias_and_activation(backend, device, m, dtype):
    """The residual comes after bias and activation, onto the product rounded as linear stores it."""
    x, w = randn((m, K), dtype, 13, device), randn((N, K), dtype, 14, device, scale=0.2)
    bias, res = randn((N,), dtype, 15, device), randn((m, N), dtype, 16, device)
    want = rounded(F.silu(F.linear(t64(x), t64(w), t64(bias))), dtype) + t64(res)
    got = tk.linear(x, w, bias=bias, activation="silu", residual=res, out=poisoned((m, N), dtype, device))
    assert_close(got, want, dtype, **TOL[dtype])
    tk.linear(x, w, bias=bias, activation="silu", residual=res, out=res)
    assert_close(res, want, dtype, **TOL[dtype])


def test_leading_axes_and_tilesafe_tensors(backend, device):
    x = ts.tensor(randn((2, 3, K), "f32", 17).numpy(), device=device)
    g = ts.tensor(randn((K,), "f32", 18).numpy(), device=device)
    w = ts.tensor(randn((N, K), "f32", 19).numpy(), device=device)
    got = tk.rms_norm_linear(x, g, w)
    assert isinstance(got, ts.Tensor) and got.shape == (2, 3, N)
    assert_close(got, F.linear(norm_oracle(x, g, 1e-6, "f32"), t64(w)), "f32", **TOL["f32"])


# --- linear_argmax -------------------------------------------------------------------------


def argmax_oracle(logits):
    """(ids, log-probabilities at them) of float64 logits."""
    ids = logits.argmax(-1)
    return ids, logits.log_softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("dtype, m, norm", [("f32", 1, True), ("f32", 5, False), ("f32", 20, True),
                                             ("f16", 1, False), ("f16", 5, True), ("bf16", 1, True), ("bf16", 5, True)])
def test_linear_argmax(backend, device, m, dtype, norm):
    """20 rows: two passes of 16 and 4."""
    x, w = randn((m, K), dtype, 20, device), randn((300, K), dtype, 21, device)
    g = randn((K,), dtype, 22, device) if norm else None
    ids, lps = poisoned((m,), torch.int32, device), poisoned((m,), "f32", device)
    got = tk.linear_argmax(x, w, norm_weight=g, out=ids, logprobs_out=lps)
    assert got[0] is ids and got[1] is lps
    logits = one_launch_norm_linear(x, g, w, 1e-6, dtype) if norm else F.linear(t64(x), t64(w))
    want_ids, want_lp = argmax_oracle(rounded(logits, dtype))
    assert torch.equal(ids.cpu().long(), want_ids)
    assert_close(lps, want_lp, "f32", rtol=1e-4, atol=1e-4)


def test_linear_argmax_ties_go_to_the_lowest_index(backend, device):
    """Equal logits in different blocks and within one block: the first, as torch.argmax."""
    x = torch.ones((3, 32), device=device)
    w = torch.zeros((200, 32), device=device)
    w[[150, 37, 38, 199]] = 0.5                   # rows 0, 1: logits 16 at 37, 38, 150, 199
    x[2, 16:] = -1.0                              # row 2: every logit 0
    ids, lps = tk.linear_argmax(x, w)
    assert ids.tolist() == [37, 37, 0]
    want = argmax_oracle(F.linear(x.double().cpu(), w.double().cpu()))[1]
    assert_close(lps, want, "f32")


def test_linear_argmax_agrees_with_argmax_of_linear_over_leading_axes(backend, device):
    x, w = randn((2, 3, K), "f32", 23, device), randn((90, K), "f32", 24, device)
    ids, lps = tk.linear_argmax(x, w)
    assert ids.shape == (2, 3) and ids.dtype == torch.int32 and lps.shape == (2, 3)
    assert torch.equal(ids, tk.argmax(tk.linear(x, w)))


# --- bad input ------------------------------------------------------------------------------


def test_a_norm_weight_of_the_wrong_length_is_refused():
    x, w = torch.randn(2, 16), torch.randn(8, 16)
    with pytest.raises(ts.LaunchError) as e:
        tk.rms_norm_linear(x, torch.ones(15), w)  # E:norm-len
    assert_at_call(e.value, HERE, "E:norm-len", "rms_norm_linear: `norm_weight` must have shape (16,)")


def test_a_weight_whose_k_differs_is_refused():
    with pytest.raises(ts.LaunchError) as e:
        tk.rms_norm_linear(torch.randn(2, 16), torch.ones(16), torch.randn(8, 12))  # E:norm-k
    assert_at_call(e.value, HERE, "E:norm-k", "needs x of shape (..., K) and w of shape (N, K)")


def test_mixed_dtypes_are_refused():
    with pytest.raises(ts.LaunchError) as e:
        tk.silu_mul_linear(torch.randn(2, 16), torch.randn(8, 8, dtype=torch.float16))  # E:dtypes
    assert_at_call(e.value, HERE, "E:dtypes", "`w` has dtype f16 but `gate_up` has f32")


def test_an_odd_gate_up_is_refused():
    with pytest.raises(ts.LaunchError) as e:
        tk.silu_mul_linear(torch.randn(2, 15), torch.randn(8, 7))  # E:odd
    assert_at_call(e.value, HERE, "E:odd", "`gate_up` must be (..., 2 I)")


def test_a_down_projection_of_the_wrong_width_is_refused():
    with pytest.raises(ts.LaunchError) as e:
        tk.silu_mul_linear(torch.randn(2, 16), torch.randn(8, 16))  # E:down
    assert_at_call(e.value, HERE, "E:down", "`w` must be (N, 8) for gate_up of shape (2, 16)")


def test_a_residual_of_the_wrong_shape_is_refused():
    x, w, res = torch.randn(2, 16), torch.randn(8, 16), torch.randn(2, 9)
    before = snapshot(res)
    with pytest.raises(ts.LaunchError) as e:
        tk.linear(x, w, residual=res)  # E:res-shape
    assert_unchanged(before, res)
    assert_at_call(e.value, HERE, "E:res-shape", "linear: `residual` has shape (2, 9), but the product is (2, 8)")


def test_an_out_that_overlaps_the_residual_otherwise_is_refused():
    """out=residual itself is the in-place form; a shifted view of the same bytes is not."""
    x, w, buf = torch.randn(2, 16), torch.randn(8, 16), torch.randn(2, 9)
    before = snapshot(buf)
    with pytest.raises(ts.AliasError) as e:
        tk.linear(x, w, residual=buf[:, :8], out=buf[:, 1:])  # E:res-alias
    assert_unchanged(before, buf)
    assert_at_call(e.value, HERE, "E:res-alias", "linear: `out` shares memory with the input `residual`")


def test_linear_argmax_refuses_an_out_of_the_wrong_dtype():
    with pytest.raises(ts.LaunchError) as e:
        tk.linear_argmax(torch.randn(2, 16), torch.randn(8, 16), out=torch.empty(2, dtype=torch.int64))  # E:ids
    assert_at_call(e.value, HERE, "E:ids", "`out` has shape (2,) and dtype i64, but the result is (2,) i32")


def test_linear_argmax_refuses_a_norm_weight_of_the_wrong_length():
    with pytest.raises(ts.LaunchError) as e:
        tk.linear_argmax(torch.randn(2, 16), torch.randn(8, 16), norm_weight=torch.ones(4))  # E:head-norm
    assert_at_call(e.value, HERE, "E:head-norm", "linear_argmax: `norm_weight` must have shape (16,)")


@pytest.mark.reference_only
def test_repeated_calls_through_their_plans_compute_each_calls_inputs(backend, device):
    """The third call of a layout takes its plan's fast form: still each call's own tensors,
    the in-place residual and linear_argmax's partials (in the scratch) included."""
    for i in range(3):
        x, g = randn((1, K), "f32", 30 + i, device), randn((K,), "f32", 40 + i, device)
        w, gu = randn((N, K), "f32", 50 + i, device), randn((1, 2 * K), "f32", 60 + i, device)
        res = randn((1, N), "f32", 70 + i, device)
        want_res = F.linear(F.silu(t64(gu)[:, :K]) * t64(gu)[:, K:], t64(w)) + t64(res)
        assert_close(tk.rms_norm_linear(x, g, w), F.linear(norm_oracle(x, g, 1e-6, "f32"), t64(w)),
                     "f32", **TOL["f32"])
        tk.silu_mul_linear(gu, w, residual=res, out=res)
        assert_close(res, want_res, "f32", **TOL["f32"])
        ids, _ = tk.linear_argmax(x, w, norm_weight=g)
        want_ids = F.linear(norm_oracle(x, g, 1e-6, "f32"), t64(w)).argmax(-1)     # the oracle is on the CPU
        assert torch.equal(ids.long().cpu(), want_ids)
