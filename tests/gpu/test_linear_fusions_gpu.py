"""The fused decode GEMVs through Triton on the GPU at Qwen3-4B's shapes (bf16, E 2560, I 9728,
vocabulary 151936), M = 1 and 8: each against torch in float32 on the same rounded inputs,
and against the unfused library sequence it replaces (the same tiles and rounding points:
close to bf16 rounding); a captured `ts.graph()` replay equal to the eager calls.
The small-shape oracle tests of every dtype are tests/kernels/test_linear_fusions.py (its
`triton` backend runs under -m gpu)."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk

pytestmark = pytest.mark.gpu
F = torch.nn.functional
E, I, QKV, V = 2560, 9728, 6144, 151936
BF = torch.bfloat16


def rand(*shape, scale=1.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, device="cuda")).to(BF)


def normed(x, g, eps=1e-6):
    """rms_norm in float32, rounded to bf16 as the kernel stores it."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g.float()).to(BF)


def close(got, want, rel=2e-2):
    err = (got.float() - want.float()).abs().max().item()
    assert err <= rel * want.float().abs().max().item(), err


@pytest.mark.parametrize("m", [1, 8])
def test_rms_norm_linear_at_the_qkv_and_gate_up_shapes(m):
    x, g = rand(m, E, seed=1), 1 + rand(E, scale=0.1, seed=2)
    for n, seed in ((QKV, 3), (2 * I, 4)):
        w = rand(n, E, scale=0.02, seed=seed)
        got = tk.rms_norm_linear(x, g, w, out=torch.full((m, n), float("nan"), device="cuda", dtype=BF))
        close(got, F.linear(normed(x, g).float(), w.float()))
        unfused = tk.linear(tk.rms_norm(x, g, 1e-6), w)
        close(got, unfused, rel=1e-2)


@pytest.mark.parametrize("m", [1, 8])
def test_o_and_down_projections_add_the_residual_in_place(m):
    attn, wo = rand(m, 4096, seed=5), rand(E, 4096, scale=0.02, seed=6)
    gu, wd = rand(m, 2 * I, seed=7), rand(E, I, scale=0.02, seed=8)
    res = rand(m, E, seed=9)
    want = res.float() + F.linear(attn.float(), wo.float()).to(BF).float()
    tk.linear(attn, wo, residual=res, out=res)
    close(res, want)
    act = (F.silu(gu[:, :I].float()) * gu[:, I:].float()).to(BF)
    want = res.float() + F.linear(act.float(), wd.float()).to(BF).float()
    tk.silu_mul_linear(gu, wd, residual=res, out=res)
    close(res, want)


@pytest.mark.parametrize("m", [1, 8])
def test_linear_argmax_picks_the_largest_logit_at_the_vocabulary(m):
    x, g = rand(m, E, seed=10), 1 + rand(E, scale=0.1, seed=11)
    lm = rand(V, E, scale=0.02, seed=12)
    ids, lps = tk.linear_argmax(x, lm, norm_weight=g)
    logits = tk.linear(tk.rms_norm(x, g, 1e-6), lm).float()            # (m, V) the unfused LM head
    top = logits.max(-1).values
    picked = logits.gather(1, ids.long()[:, None])[:, 0]
    ulp = top.abs() * 2 ** -7                                           # one bf16 step
    assert (top - picked <= ulp).all(), (top, picked)                   # the maximum, or a bf16 tie of it
    want_lp = logits.log_softmax(-1).gather(1, ids.long()[:, None])[:, 0]
    # The fused head rounds x * g to bf16 before the 1/rms scale (NORM_LATE), the unfused one after:
    # the picked logit may differ by one bf16 step of its size.
    assert ((lps - want_lp).abs() <= ulp + 2e-2).all(), (lps, want_lp)


def test_a_captured_fused_layer_replays_as_it_runs_eagerly():
    m = 1
    w = dict(qkv=rand(QKV, E, scale=0.02, seed=13), o=rand(E, 4096, scale=0.02, seed=14),
             gu=rand(2 * I, E, scale=0.02, seed=15), down=rand(E, I, scale=0.02, seed=16),
             g=1 + rand(E, scale=0.1, seed=17), lm=rand(V, E, scale=0.02, seed=18))
    start, attn = rand(m, E, seed=19), rand(m, 4096, seed=20)
    res, qkv, gu = start.clone(), torch.empty(m, QKV, device="cuda", dtype=BF), torch.empty(m, 2 * I, device="cuda",
                                                                                            dtype=BF)
    ids, lps = torch.empty(m, dtype=torch.int32, device="cuda"), torch.empty(m, device="cuda")

    def layer():
        tk.rms_norm_linear(res, w["g"], w["qkv"], out=qkv)
        tk.linear(attn, w["o"], residual=res, out=res)
        tk.rms_norm_linear(res, w["g"], w["gu"], out=gu)
        tk.silu_mul_linear(gu, w["down"], residual=res, out=res)
        tk.linear_argmax(res, w["lm"], norm_weight=w["g"], out=ids, logprobs_out=lps)
    layer()                                                            # compiles, makes the scratch
    eager = [t.clone() for t in (qkv, gu, res, ids, lps)]
    res.copy_(start)
    with ts.graph() as graph:
        layer()
    res.copy_(start)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip((qkv, gu, res, ids, lps), eager):
        assert torch.equal(a, b)


@pytest.mark.parametrize("prefetch", [True, False])
def test_the_32b_down_projection_with_and_without_the_prefetch_loop(prefetch):
    """Qwen3-32B's down projection (5120 x 25600; the H200 table's GEMV prefetches): the loop
    that loads the next step's gate, up and weight tiles before this step's SiLU-mul."""
    e, i = 5120, 25600
    gu, wd, res = rand(1, 2 * i, seed=21), rand(e, i, scale=0.02, seed=22), rand(1, e, seed=23)
    act = (F.silu(gu[:, :i].float()) * gu[:, i:].float()).to(BF)
    want = res.float() + F.linear(act.float(), wd.float()).to(BF).float()
    cfg = {"block_n": 8, "block_k": 512, "split_k": 1, "min_blocks": 1, "prefetch": prefetch, "num_stages": 3}
    close(tk.silu_mul_linear(gu, wd, residual=res, config=cfg), want)
    close(tk.silu_mul_linear(gu, wd, residual=res), want)              # the table's pick
