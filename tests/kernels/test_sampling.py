"""`tk.sample`: per-row sampling on the device against an oracle written here in NumPy
(float64): greedy is the first argmax; a sampled row is the inverse-CDF choice, in vocabulary
order, over the top-k / top-p filtered weights exp((x - max) / T) at u * (kept mass), with u
the Philox number of (seed, step) from tests/philox_oracle.py; logprobs are log_softmax of
the raw logits. Rows whose choice sits within rounding of a CDF step are counted, not
compared (both sides round differently there), and must be rare.
"""
import os

import numpy as np
import pytest
import torch
from call_helpers import assert_at_call
from philox_oracle import uniform

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels import sampling

HERE = os.path.abspath(__file__)
EDGE = 1e-4          # relative distance to a CDF step (or a top-p boundary) below which a row is ambiguous


# --- the oracle -------------------------------------------------------------------------------
def oracle(x: np.ndarray, temp: float, k: int, p: float, seed: int, step: int):
    """(token, logprob, allowed mask, ambiguous) for one row of logits."""
    x = x.astype(np.float64)                                         # (V,)
    m = x.max()
    logp = x - m - np.log(np.exp(x - m).sum())
    if temp == 0:
        t = int(np.argmax(x))
        return t, logp[t], x == m, False
    keep = np.isfinite(x)
    if 0 < k < x.size:
        keep &= x >= np.sort(x)[::-1][k - 1]                         # ties at the k-th value stay
    w = np.where(keep, np.exp((x - m) / temp), 0.0)
    ambiguous = False
    if p < 1:
        values = np.unique(x[keep])[::-1]                            # distinct kept values, descending
        mass = np.array([w[x >= v].sum() for v in values])           # mass at or above each value
        j = int(np.argmax(mass >= p * w.sum()))                      # the first value reaching p
        ambiguous |= bool(np.any(np.abs(mass - p * w.sum()) <= EDGE * w.sum()))
        keep &= x >= values[j]
        w = np.where(keep, w, 0.0)
    c = np.cumsum(w)
    target = float(uniform(seed, step)) * c[-1]
    t = int(np.argmax(c > target))
    ambiguous |= bool(np.any(np.abs(c[w > 0] - target) <= EDGE * c[-1]))
    return t, logp[t], keep, ambiguous


def rows(b, seed0=0):
    """Per-row parameters covering greedy, plain temperature, top-k, top-p and both."""
    temps = [0.0, 1.0, 0.7, 1.3, 0.5, 2.0, 1.0, 0.9]
    ks = [0, 0, 5, 0, 3, 0, 7, 1]
    ps = [1.0, 1.0, 1.0, 0.8, 0.9, 0.5, 0.95, 1.0]
    pick = [i % len(temps) for i in range(b)]
    return (np.array([temps[i] for i in pick], np.float32), np.array([ks[i] for i in pick], np.int32),
            np.array([ps[i] for i in pick], np.float32), np.arange(seed0, seed0 + b, dtype=np.int64) * 7919 - 5,
            np.arange(b, dtype=np.int32) * 3 + 11)


def run(x, params, device, dtype=torch.float32, out=None):
    tensors = [torch.tensor(a, device=device) for a in params]
    xt = torch.tensor(x, device=device).to(dtype)
    return tk.sample(xt, *tensors, out=out[0] if out else None, logprobs_out=out[1] if out else None)


def logits(rng, b, v, scale=2.0):
    return (rng.standard_normal((b, v)) * scale).astype(np.float32)


def compare(x, params, tok, lp, rtol=1e-5):
    """Every unambiguous row equals the oracle; returns how many rows were ambiguous."""
    skipped = 0
    for r in range(x.shape[0]):
        want, want_lp, allowed, ambiguous = oracle(x[r], *(float(a[r]) if a.dtype.kind == "f" else int(a[r])
                                                           for a in params))
        assert allowed[tok[r]], f"row {r}: token {tok[r]} is outside the allowed set"
        if ambiguous:
            skipped += 1
            continue
        assert tok[r] == want, f"row {r}: {tok[r]} != {want}"
        np.testing.assert_allclose(lp[r], want_lp, rtol=rtol, atol=1e-5)
    return skipped


# --- against the oracle -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rows_equal_the_oracle(backend, device, dtype):
    rng = np.random.default_rng(1)
    x = logits(rng, 16, 100)
    if dtype == "bf16":
        x = torch.tensor(x).to(torch.bfloat16).float().numpy()      # the values the kernel reads
    params = rows(16)
    tok = torch.full((16,), -7, dtype=torch.int32, device=device)    # poisoned outputs
    lp = torch.full((16,), float("nan"), device=device)
    run(x, params, device, torch.bfloat16 if dtype == "bf16" else torch.float32, out=(tok, lp))
    assert compare(x, params, tok.cpu().numpy(), lp.cpu().numpy()) <= 1


def test_many_vocabulary_tiles(backend, device, monkeypatch):
    """A vocabulary of 7 ragged tiles: every pass walks them all."""
    monkeypatch.setattr(sampling, "BLOCK_V", 16)
    rng = np.random.default_rng(2)
    x = logits(rng, 6, 100)
    params = rows(6, seed0=3)
    tok, lp = run(x, params, device)
    assert compare(x, params, tok.cpu().numpy(), lp.cpu().numpy()) <= 1


def test_greedy_is_the_first_maximum(backend, device, monkeypatch):
    monkeypatch.setattr(sampling, "BLOCK_V", 16)
    x = logits(np.random.default_rng(3), 4, 50)
    x[0, [7, 30]] = 9.0                                               # a tie across tiles: the first wins
    x[1, [40, 41]] = 9.0
    x[2, :] = -3.0                                                    # all equal: index 0
    params = (np.zeros(4, np.float32), np.array([0, 5, 0, 1], np.int32), np.array([1, 0.5, 1, 1], np.float32),
              np.arange(4, dtype=np.int64), np.zeros(4, np.int32))
    tok, lp = run(x, params, device)
    assert tok.cpu().tolist() == [7, 40, 0, int(np.argmax(x[3]))]
    want = torch.log_softmax(torch.tensor(x, dtype=torch.float64), -1)[torch.arange(4), tok.cpu().long()]
    np.testing.assert_allclose(lp.cpu().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.reference_only   # 192 rows: minutes on Triton's interpreter; the GPU run covers triton
def test_top_k_and_top_p_stay_in_the_allowed_set(backend, device):
    """One row repeated over 64 steps: every token is allowed and the frequencies follow the
    filtered distribution (a fixed tolerance on the total variation distance)."""
    rng = np.random.default_rng(4)
    x = np.repeat(logits(rng, 1, 40, scale=1.0), 64, axis=0)
    for temp, k, p in ((1.0, 6, 1.0), (0.8, 0, 0.7), (1.5, 10, 0.8)):
        params = (np.full(64, temp, np.float32), np.full(64, k, np.int32), np.full(64, p, np.float32),
                  np.full(64, 1234, np.int64), np.arange(64, dtype=np.int32))
        tok = run(x, params, device)[0].cpu().numpy()
        _, _, allowed, _ = oracle(x[0], temp, k, p, 1234, 0)
        assert allowed[tok].all(), (temp, k, p, tok[~allowed[tok]])
        w = np.where(allowed, np.exp((x[0] - x[0].max()) / temp), 0.0)
        seen = np.bincount(tok, minlength=40) / 64
        assert 0.5 * np.abs(seen - w / w.sum()).sum() < 0.3, (temp, k, p)


def test_top_k_when_the_largest_values_share_a_lane(backend, device, monkeypatch):
    """Tiles of 16: the top 3 of row 0 sit in one lane (indices 5, 21, 37), so the k-th largest
    lane maximum is below the k-th largest value and the search continues over the row; in
    row 1 they sit in three lanes and the lanes' maxima give the threshold at once."""
    monkeypatch.setattr(sampling, "BLOCK_V", 16)
    x = logits(np.random.default_rng(7), 2, 64, scale=0.5)
    x[0, [5, 21, 37]] = [6.0, 5.5, 5.0]
    x[1, [2, 19, 40]] = [6.0, 5.5, 5.0]
    params = (np.full(2, 1.0, np.float32), np.full(2, 3, np.int32), np.ones(2, np.float32),
              np.array([3, 4], np.int64), np.zeros(2, np.int32))
    for step in range(3):
        params = params[:4] + (np.full(2, step, np.int32),)
        tok, lp = run(x, params, device)
        assert tok[0].item() in (5, 21, 37) and tok[1].item() in (2, 19, 40)
        assert compare(x, params, tok.cpu().numpy(), lp.cpu().numpy()) == 0


def test_rows_of_few_distinct_values(backend, device, monkeypatch):
    """Logits from 6 values: every threshold falls on a tie, which stays whole."""
    monkeypatch.setattr(sampling, "BLOCK_V", 32)
    x = np.random.default_rng(8).integers(0, 6, (8, 100)).astype(np.float32) * 0.75
    params = rows(8, seed0=5)
    tok, lp = run(x, params, device)
    assert compare(x, params, tok.cpu().numpy(), lp.cpu().numpy()) <= 1


def test_masked_logits_are_never_chosen(backend, device):
    x = logits(np.random.default_rng(5), 8, 64)
    x[:, ::2] = -np.inf                                               # a grammar mask, say
    params = rows(8, seed0=9)
    tok, lp = run(x, params, device)
    assert (tok.cpu().numpy() % 2 == 1).all()
    assert np.isfinite(lp.cpu().numpy()).all()


def test_an_infinite_temperature_samples_the_finite_logits_uniformly(backend, device):
    """temperature inf is the limit of large temperatures: uniform over the finite logits, as
    1e30 (kernels.sampling.TEMPERATURE_MAX). Old code took 1 / inf = 0 and weighed a masked
    logit exp(-inf * 0) = NaN: every row picked the last index."""
    x = logits(np.random.default_rng(12), 8, 64)
    x[:, 40:] = -np.inf
    temps, ks, ps, seeds, steps = rows(8, seed0=3)
    inf = np.full(8, np.inf, np.float32)
    tok, lp = (t.cpu().numpy() for t in run(x, (inf, np.zeros(8, np.int32), np.ones(8, np.float32), seeds, steps),
                                             device))
    assert (tok < 40).all() and np.isfinite(lp).all() and len(set(tok.tolist())) > 1
    assert compare(x, (np.full(8, 1e30, np.float32), np.zeros(8, np.int32), np.ones(8, np.float32), seeds, steps),
                   tok, lp) <= 1


# --- reproducibility ------------------------------------------------------------------------------
def test_seeds_reproduce_and_rows_do_not_depend_on_the_batch(backend, device):
    rng = np.random.default_rng(6)
    x = logits(rng, 8, 64, scale=1.0)
    params = rows(8, seed0=1)
    tok, lp = (t.cpu().numpy() for t in run(x, params, device))
    again = run(x, params, device)[0].cpu().numpy()
    np.testing.assert_array_equal(tok, again)
    for r in (1, 4, 6):                                               # the row alone, and with others
        alone = run(x[r:r + 1], [a[r:r + 1] for a in params], device)
        assert alone[0].item() == tok[r] and alone[1].item() == lp[r]
    other = list(params)
    other[3] = params[3] + 1                                          # other seeds: other tokens (mostly)
    moved = run(x, other, device)[0].cpu().numpy()
    sampled = params[0] > 0
    assert (moved[sampled] != tok[sampled]).any()


# --- arguments --------------------------------------------------------------------------------------
def _args(b=2, v=8, **change):
    a = dict(logits=torch.randn(b, v), temperature=torch.ones(b), top_k=torch.zeros(b, dtype=torch.int32),
             top_p=torch.ones(b), seed=torch.zeros(b, dtype=torch.int64), step=torch.zeros(b, dtype=torch.int32))
    a.update(change)
    return a


def test_a_float_top_k_is_refused():
    with pytest.raises(ts.LaunchError) as ei:
        tk.sample(**_args(top_k=torch.zeros(2)))  # E:float-topk
    assert_at_call(ei.value, HERE, "E:float-topk", "`top_k` has dtype f32; this function takes i32")


def test_a_parameter_of_the_wrong_length_is_refused():
    with pytest.raises(ts.LaunchError) as ei:
        tk.sample(**_args(temperature=torch.ones(3)))  # E:short
    assert_at_call(ei.value, HERE, "E:short", "`temperature` must have one entry per row of logits, shape (2,)")


def test_one_dimensional_logits_are_refused():
    with pytest.raises(ts.LaunchError) as ei:
        tk.sample(**_args(logits=torch.randn(8)))  # E:rank
    assert_at_call(ei.value, HERE, "E:rank", "`logits` must be (rows, vocabulary)")


def test_an_out_of_the_wrong_dtype_is_refused():
    with pytest.raises(ts.LaunchError) as ei:
        tk.sample(**_args(), out=torch.empty(2, dtype=torch.int64))  # E:out
    assert_at_call(ei.value, HERE, "E:out", "`out` has shape (2,) and dtype i64, but the result is (2,) i32")


# --- compiles for the H200 --------------------------------------------------------------------------
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="TRITON_INTERPRET=1 cannot compile")
def test_the_kernel_compiles_for_hopper_at_qwen3_size():
    """The while loops inside ifs, the Philox call and the (8192,) tiles lower to sm_90 code."""
    pytest.importorskip("triton")
    from tilesafe.runtime.compile_ahead import compile_ahead
    b, v = 8, 151936
    compiled = compile_ahead(
        sampling.sample_kernel, tok=ts.spec((b,), ts.i32, tile=(1,)), logprob=ts.spec((b,), ts.f32, tile=(1,)),
        x=ts.spec((b, v), ts.bf16), temperature=ts.spec((b,), ts.f32), top_k=ts.spec((b,), ts.i32),
        top_p=ts.spec((b,), ts.f32), seed=ts.spec((b,), ts.i64), step=ts.spec((b,), ts.i32),
        BV=sampling.BLOCK_V, NTP=32, arch=90, schedule=ts.schedule(num_warps=sampling.warps(sampling.BLOCK_V)))
    assert "tt.mulhiui" in compiled.asm["ttir"] and "mul.hi.u32" in compiled.asm["ptx"]   # Philox's rounds
