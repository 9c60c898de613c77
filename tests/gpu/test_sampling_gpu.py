"""`tk.sample` through Triton on the GPU at Qwen3's vocabulary (151936, bf16 logits): the
same tokens as the reference interpreter on the CPU (the same Philox numbers, the same
thresholds), greedy equal to torch.argmax, logprobs equal to torch.log_softmax, tokens inside
the top-k / top-p sets torch computes, a captured `ts.graph()` replay equal to eager calls,
and the time of one call (printed; run with `pytest -m gpu -s`). `ts.rand` itself gives the
oracle's bits on the GPU (tests/philox_oracle.py)."""
import numpy as np
import pytest
import torch
from philox_oracle import uniform

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.engine.sampler import Sampler
from tilesafe.engine.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu
V = 151936
B = 8


@ts.kernel
def noise(z: ts.Mut[ts.f32, ("BN",)], seed: int, BN: ts.Const[int]):
    z.store(ts.rand(seed, ts.block_id(0) * BN + ts.arange(0, BN) - 100))   # (BN,) offsets from -100


@pytest.mark.parametrize("seed", [0, -3, 2**40 + 5])
def test_rand_gives_the_oracles_bits_on_the_gpu(seed):
    z = noise(ts.empty(1000, device="cuda").partition((256,)), seed).sync().unpartition()
    want = np.array([uniform(seed, i - 100) for i in range(1000)], np.float32)
    np.testing.assert_array_equal(z.numpy().view(np.uint32), want.view(np.uint32))


def _params(device):
    """Greedy, Qwen3's defaults (T 0.6, top-k 20, top-p 0.95), and each filter alone."""
    temps = [0.0, 0.6, 1.0, 0.8, 1.0, 0.6, 1.2, 0.0]
    ks = [0, 20, 0, 50, 0, 20, 5, 3]
    ps = [1.0, 0.95, 1.0, 1.0, 0.9, 0.95, 0.5, 0.5]
    return (torch.tensor(temps, device=device), torch.tensor(ks, dtype=torch.int32, device=device),
            torch.tensor(ps, device=device), torch.arange(B, dtype=torch.int64, device=device) * 1000003 + 7,
            torch.arange(B, dtype=torch.int32, device=device) + 40)


def _logits(device="cuda"):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, V, generator=g) * 2.0                          # (B, V)
    x[:, torch.randint(0, V, (64,), generator=g)] += 8.0             # a few likely tokens, as a model has
    return x.to(torch.bfloat16).to(device)


def _allowed(x: torch.Tensor, temp: float, k: int, p: float) -> torch.Tensor:
    """(V,) bool: the tokens top-k then top-p keep (ties at a threshold kept), in float64."""
    x = x.double()
    keep = torch.ones_like(x, dtype=torch.bool)
    if 0 < k < x.numel():
        keep &= x >= torch.topk(x, k).values[-1]
    if temp > 0 and p < 1:
        w = torch.where(keep, torch.exp((x - x.max()) / temp), torch.zeros_like(x))
        xs, order = torch.sort(x, descending=True)
        mass = torch.cumsum(w[order], 0)                                # mass of the first j+1 values
        first = int(torch.nonzero(mass >= p * mass[-1] * (1 - 1e-4))[0])  # a little slack for f32 sums
        keep &= x >= xs[first]
    return keep


def test_gpu_tokens_equal_the_reference_backend_and_torch():
    x = _logits()
    params = _params("cuda")
    tok, lp = tk.sample(x, *params)
    with ts.backend("reference"):
        ref_tok, ref_lp = tk.sample(x.cpu(), *(t.cpu() for t in params))
    tok, lp = tok.cpu(), lp.cpu()
    assert torch.equal(tok, ref_tok), (tok, ref_tok)
    torch.testing.assert_close(lp, ref_lp, rtol=1e-5, atol=1e-5)
    xf = x.float().cpu()
    want = torch.log_softmax(xf.double(), -1)[torch.arange(B), tok.long()]
    torch.testing.assert_close(lp.double(), want, rtol=1e-5, atol=1e-5)
    temps, ks, ps = (t.cpu().tolist() for t in params[:3])
    for r in range(B):
        if temps[r] == 0:
            assert tok[r] == torch.argmax(xf[r])
        else:
            assert _allowed(xf[r], temps[r], ks[r], ps[r])[tok[r]], r


def test_a_captured_sampler_replays_like_eager_calls():
    x = _logits()
    s = Sampler(B, "cuda")
    reqs = [SamplingParams(temperature=t, top_k=k, top_p=p, seed=i)
            for i, (t, k, p) in enumerate(zip(*(v.cpu().tolist() for v in _params("cpu")[:3])))]
    s.set_rows(reqs, [s.seed_for(r) for r in reqs])
    tok, lp = torch.empty(B, dtype=torch.int32, device="cuda"), torch.empty(B, device="cuda")
    eager = []
    for step in range(3):
        s.set_steps([step] * B)
        s(x, tok, lp)
        eager.append((tok.clone(), lp.clone()))
    with ts.graph() as g:                                             # kernels compiled by the eager calls
        s(x, tok, lp)
    for step in range(3):
        s.set_steps([step] * B)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(tok, eager[step][0]) and torch.equal(lp, eager[step][1]), step


MODES = {"greedy": (0.0, 0, 1.0), "qwen3-defaults": (0.6, 20, 0.95), "top-p-only": (1.0, 0, 0.9)}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("rows", [1, 8])
def test_time_of_one_call(mode, rows):
    """Greedy reads the row once; Qwen3's defaults three times (top-k's count, then top-p in
    registers); top-p alone bisects over the row (10-20 passes)."""
    x = _logits()[:rows].contiguous()
    temps, ks, ps, seeds, steps = (t[:rows].contiguous() for t in _params("cuda"))
    temp, k, p = MODES[mode]
    temps.fill_(temp)
    ks.fill_(k)
    ps.fill_(p)
    tok, lp = torch.empty(rows, dtype=torch.int32, device="cuda"), torch.empty(rows, device="cuda")
    for _ in range(3):
        tk.sample(x, temps, ks, ps, seeds, steps, out=tok, logprobs_out=lp)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        tk.sample(x, temps, ks, ps, seeds, steps, out=tok, logprobs_out=lp)
    end.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(end) / 20 * 1000
    print(f"\nsample V={V} bf16 rows={rows} {mode}: {us:.1f} us per call (host included)")
    assert us < 20000                                                 # sanity only; the number is printed
