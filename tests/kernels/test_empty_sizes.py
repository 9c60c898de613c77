"""Empty sizes through every public `tilesafe.kernels` function (issues 16, 17): each size 0 in
turn either gives torch's result (written into a poisoned `out=`: an empty output, or, for
an empty sum over K, zeros plus bias and activation) or is a LaunchError that names the
argument and the size at the caller's line — never a ZeroDivisionError or an IndexError
from the library's tiling (before this file: linear/matmul and the fused GEMVs with K = 0,
decode/paged attention with head_dim 0, decode_tiling over an empty cache)."""
import math

import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_at_call
from kernel_helpers import assert_close, poisoned
from tilesafe.kernels import config_model, configs
from tilesafe.kernels.attention_model import decode_tiling

HERE = __file__


def r(*shape, seed=0, dev="cpu"):
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    return (torch.rand(shape, generator=g, dtype=torch.float32) * 2 - 1).to(dev)


def ints(n, dev="cpu", dtype=torch.int32):
    return torch.arange(n, dtype=dtype, device=dev)


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w if x.shape[-1] else x.clone()


def _rope(x, pos, theta=1e6):
    d = x.shape[-1]
    if d == 0 or x.numel() == 0:
        return x.clone()
    inv = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    ang = pos.double()[:, None] * inv[None, :]                   # (T, D/2)
    cos, sin = ang.cos()[:, None, :].float(), ang.sin()[:, None, :].float()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)



def flash_case(q, kv):
    """A CASES entry: flash_attention of q's shape over k and v of shape kv, one of them empty."""
    return lambda d: (lambda out: tk.flash_attention(r(*q, dev=d), r(*kv, dev=d), r(*kv, dev=d), out=out),
                      torch.zeros(q))

# name -> dev -> (call taking out=, torch's result). Each case makes one size 0.
CASES = {
    "matmul M=0": lambda d: (lambda out: tk.matmul(r(0, 4, dev=d), r(4, 5, dev=d), out=out),
                             torch.zeros(0, 5)),
    "matmul N=0": lambda d: (lambda out: tk.matmul(r(3, 4, dev=d), r(4, 0, dev=d), out=out), torch.zeros(3, 0)),
    "matmul K=0 bias silu": lambda d: (
        lambda out: tk.matmul(r(3, 0, dev=d), r(0, 5, dev=d), bias=r(5, dev=d), activation="silu", out=out),
        F.silu(r(5).expand(3, 5))),
    "matmul K=0 one row a (K,)": lambda d: (lambda out: tk.matmul(r(0, dev=d), r(0, 5, dev=d), out=out),
                                            torch.zeros(5)),
    "matmul K=0 M=40 (tiled)": lambda d: (lambda out: tk.matmul(r(40, 0, dev=d), r(0, 5, dev=d), out=out),
                                          torch.zeros(40, 5)),
    "linear M=0": lambda d: (lambda out: tk.linear(r(0, 4, dev=d), r(5, 4, dev=d), out=out), torch.zeros(0, 5)),
    "linear N=0": lambda d: (lambda out: tk.linear(r(3, 4, dev=d), r(0, 4, dev=d), out=out), torch.zeros(3, 0)),
    "linear K=0 one row": lambda d: (lambda out: tk.linear(r(1, 0, dev=d), r(5, 0, dev=d), out=out),
                                     torch.zeros(1, 5)),
    "linear K=0 bias gelu": lambda d: (
        lambda out: tk.linear(r(3, 0, dev=d), r(5, 0, dev=d), bias=r(5, dev=d), activation="gelu", out=out),
        F.gelu(r(5).expand(3, 5))),
    "linear K=0 residual": lambda d: (
        lambda out: tk.linear(r(3, 0, dev=d), r(5, 0, dev=d), residual=r(3, 5, dev=d), out=out), r(3, 5)),
    "linear M=0 residual": lambda d: (
        lambda out: tk.linear(r(0, 4, dev=d), r(5, 4, dev=d), residual=r(0, 5, dev=d), out=out), torch.zeros(0, 5)),
    "bmm Z=0": lambda d: (lambda out: tk.bmm(r(0, 3, 4, dev=d), r(0, 4, 5, dev=d), out=out), torch.zeros(0, 3, 5)),
    "bmm M=0": lambda d: (lambda out: tk.bmm(r(2, 0, 4, dev=d), r(2, 4, 5, dev=d), out=out), torch.zeros(2, 0, 5)),
    "bmm N=0": lambda d: (lambda out: tk.bmm(r(2, 3, 4, dev=d), r(2, 4, 0, dev=d), out=out), torch.zeros(2, 3, 0)),
    "bmm K=0": lambda d: (lambda out: tk.bmm(r(2, 3, 0, dev=d), r(2, 0, 5, dev=d), out=out), torch.zeros(2, 3, 5)),
    "rms_norm_linear M=0": lambda d: (
        lambda out: tk.rms_norm_linear(r(0, 8, dev=d), r(8, dev=d), r(5, 8, dev=d), out=out), torch.zeros(0, 5)),
    "rms_norm_linear N=0": lambda d: (
        lambda out: tk.rms_norm_linear(r(3, 8, dev=d), r(8, dev=d), r(0, 8, dev=d), out=out), torch.zeros(3, 0)),
    "rms_norm_linear K=0": lambda d: (
        lambda out: tk.rms_norm_linear(r(3, 0, dev=d), r(0, dev=d), r(5, 0, dev=d), out=out), torch.zeros(3, 5)),
    "silu_mul_linear M=0 residual": lambda d: (
        lambda out: tk.silu_mul_linear(r(0, 4, dev=d), r(5, 2, dev=d), residual=r(0, 5, dev=d), out=out),
        torch.zeros(0, 5)),
    "silu_mul_linear I=0 residual": lambda d: (
        lambda out: tk.silu_mul_linear(r(3, 0, dev=d), r(5, 0, dev=d), residual=r(3, 5, dev=d), out=out), r(3, 5)),
    "rms_norm M=0": lambda d: (lambda out: tk.rms_norm(r(0, 8, dev=d), r(8, dev=d), out=out), torch.zeros(0, 8)),
    "rms_norm N=0": lambda d: (lambda out: tk.rms_norm(r(3, 0, dev=d), r(0, dev=d), out=out), torch.zeros(3, 0)),
    "layer_norm N=0": lambda d: (lambda out: tk.layer_norm(r(3, 0, dev=d), r(0, dev=d), out=out), torch.zeros(3, 0)),
    "add rows=0": lambda d: (lambda out: tk.add(r(0, 4, dev=d), r(0, 4, dev=d), out=out), torch.zeros(0, 4)),
    "add cols=0": lambda d: (lambda out: tk.add(r(3, 0, dev=d), r(3, 0, dev=d), out=out), torch.zeros(3, 0)),
    "residual_add rows=0": lambda d: (lambda out: tk.residual_add(r(0, 4, dev=d), r(0, 4, dev=d), out=out),
                                      torch.zeros(0, 4)),
    "silu_mul cols=0": lambda d: (lambda out: tk.silu_mul(r(3, 0, dev=d), r(3, 0, dev=d), out=out),
                                  torch.zeros(3, 0)),
    "silu_mul rows=0": lambda d: (lambda out: tk.silu_mul(r(0, 4, dev=d), r(0, 4, dev=d), out=out),
                                  torch.zeros(0, 4)),
    "rope T=0": lambda d: (lambda out: tk.rope(r(0, 2, 8, dev=d), ints(0, d), out=out), torch.zeros(0, 2, 8)),
    "rope H=0": lambda d: (lambda out: tk.rope(r(3, 0, 8, dev=d), ints(3, d), out=out), torch.zeros(3, 0, 8)),
    "rope D=0": lambda d: (lambda out: tk.rope(r(3, 2, 0, dev=d), ints(3, d), out=out), torch.zeros(3, 2, 0)),
    "norm_rope T=0": lambda d: (lambda out: tk.norm_rope(r(0, 2, 8, dev=d), r(8, dev=d), ints(0, d), out=out),
                                torch.zeros(0, 2, 8)),
    "norm_rope H=0": lambda d: (lambda out: tk.norm_rope(r(3, 0, 8, dev=d), r(8, dev=d), ints(3, d), out=out),
                                torch.zeros(3, 0, 8)),
    "embedding T=0": lambda d: (lambda out: tk.embedding(ints(0, d, torch.int64), r(10, 8, dev=d), out=out),
                                torch.zeros(0, 8)),
    "embedding D=0": lambda d: (lambda out: tk.embedding(ints(3, d, torch.int64), r(10, 0, dev=d), out=out),
                                torch.zeros(3, 0)),
    "softmax M=0": lambda d: (lambda out: tk.softmax(r(0, 8, dev=d), out=out), torch.zeros(0, 8)),
    "softmax N=0": lambda d: (lambda out: tk.softmax(r(3, 0, dev=d), out=out), torch.zeros(3, 0)),
    "flash_attention SQ=0": flash_case((1, 2, 0, 8), (1, 2, 4, 8)),
    "flash_attention B=0": flash_case((0, 2, 3, 8), (0, 2, 4, 8)),
    "flash_attention H=0": flash_case((1, 0, 3, 8), (1, 0, 4, 8)),
    "flash_attention D=0": flash_case((1, 2, 3, 0), (1, 2, 4, 0)),
    "decode_attention D=0": lambda d: (
        lambda out: tk.decode_attention(r(4, 0, dev=d), r(2, 5, 0, dev=d), r(2, 5, 0, dev=d), 3, out=out),
        torch.zeros(4, 0)),
    "paged_decode_attention B=0": lambda d: (
        lambda out: tk.paged_decode_attention(r(0, 4, 8, dev=d), r(4, 4, 2, 8, dev=d), r(4, 4, 2, 8, dev=d),
                                              torch.zeros(0, 2, dtype=torch.int32, device=d), ints(0, d), out=out),
        torch.zeros(0, 4, 8)),
    "paged_decode_attention D=0": lambda d: (
        lambda out: tk.paged_decode_attention(r(1, 4, 0, dev=d), r(4, 4, 2, 0, dev=d), r(4, 4, 2, 0, dev=d),
                                              torch.zeros(1, 2, dtype=torch.int32, device=d), ints(1, d) + 3,
                                              out=out),
        torch.zeros(1, 4, 0)),
    "paged_prefill_attention T=0": lambda d: (
        lambda out: tk.paged_prefill_attention(r(0, 4, 8, dev=d), r(4, 2, 2, 8, dev=d), r(4, 2, 2, 8, dev=d),
                                               torch.zeros(1, 2, dtype=torch.int32, device=d), 0, out=out),
        torch.zeros(0, 4, 8)),
    "paged_prefill_attention D=0": lambda d: (
        lambda out: tk.paged_prefill_attention(r(3, 4, 0, dev=d), r(4, 2, 2, 0, dev=d), r(4, 2, 2, 0, dev=d),
                                               torch.zeros(1, 2, dtype=torch.int32, device=d), 0, out=out),
        torch.zeros(3, 4, 0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_empty_size_gives_torchs_result_in_a_poisoned_out(backend, device, case):
    call, want = CASES[case](device)
    out = poisoned(want.shape, torch.float32, device)
    got = call(out)
    assert got is out
    assert_close(out, want, "f32")


def test_the_empty_sum_oracle_is_torchs():
    """The K = 0 results above (zeros, plus bias, then the activation) are torch's own."""
    x, w, b = r(3, 0), r(5, 0), r(5)
    assert torch.equal(F.linear(x, w, b), r(5).expand(3, 5))
    assert torch.equal(torch.matmul(r(3, 0), r(0, 5)), torch.zeros(3, 5))


def test_rms_norm_with_residual_over_empty_rows_and_columns(backend, device):
    for shape in ((0, 8), (3, 0)):
        x, res, w = r(*shape, dev=device), r(*shape, seed=1, dev=device), r(shape[1], dev=device)
        out, res_out = poisoned(shape, torch.float32, device), poisoned(shape, torch.float32, device)
        y, h = tk.rms_norm(x, w, residual=res, out=out, residual_out=res_out)
        assert y is out and h is res_out and y.shape == shape


def test_writes_of_nothing_leave_the_caches_as_they_were(backend, device):
    """paged_kv_write of no tokens, of zero-width rows, and kv_append of no tokens: torch's
    index_copy_ of nothing changes nothing."""
    kc, vc = r(8, 2, 2, 4, dev=device), r(8, 2, 2, 4, seed=1, dev=device)
    before = kc.clone(), vc.clone()
    tk.paged_kv_write(kc, vc, r(0, 2, 4, dev=device), r(0, 2, 4, dev=device), ints(0, device, torch.int64))
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    for shape in ((8, 2, 0, 4), (8, 2, 2, 0)):                   # HKV = 0, D = 0
        kc0, vc0 = r(*shape, dev=device), r(*shape, dev=device)
        rows = (3,) + shape[2:]
        got = tk.paged_kv_write(kc0, vc0, r(*rows, dev=device), r(*rows, dev=device), ints(3, device, torch.int64))
        assert got[0] is kc0 and got[1] is vc0
    q_out = poisoned((0, 4, 4), torch.float32, device)               # norm_rope_kv_write of no tokens
    got = tk.norm_rope_kv_write(r(0, 4, 4, dev=device), r(0, 2, 4, dev=device), r(0, 2, 4, dev=device),
                                r(4, dev=device), r(4, dev=device), ints(0, device), ints(0, device), kc, vc,
                                q_out=q_out)
    assert got is q_out and torch.equal(kc, before[0]) and torch.equal(vc, before[1])
    cache = r(2, 5, 4, dev=device)
    saved = cache.clone()
    tk.kv_append(cache, r(0, 2, 4, dev=device), 0)
    assert torch.equal(cache, saved)


def test_sample_and_linear_argmax_of_no_rows_return_empty_results(backend, device):
    f, i = torch.float32, torch.int32
    toks, lps = tk.sample(r(0, 10, dev=device), torch.zeros(0, device=device), torch.zeros(0, dtype=i, device=device),
                          torch.ones(0, device=device), torch.zeros(0, dtype=torch.int64, device=device),
                          torch.zeros(0, dtype=i, device=device))
    assert toks.shape == (0,) and lps.shape == (0,) and toks.dtype == i and lps.dtype == f
    ids, lps = tk.linear_argmax(r(0, 4, dev=device), r(5, 4, dev=device))
    assert ids.shape == (0,) and lps.shape == (0,)
    assert tk.argmax(r(0, 8, dev=device)).shape == (0,)


def test_sizes_torch_refuses_or_with_no_answer_are_located_launch_errors(backend, device):
    """argmax over no columns and sampling from no vocabulary (torch raises too), attention
    over no keys, linear_argmax over no features or no vocabulary, a cache of no positions."""
    d = device
    with pytest.raises(ts.LaunchError) as e:
        tk.argmax(r(3, 0, dev=d))  # call: argmax
    assert_at_call(e.value, HERE, "call: argmax", "argmax", "non-empty last axis", "(3, 0)")
    p = dict(temperature=torch.zeros(2, device=d), top_k=torch.zeros(2, dtype=torch.int32, device=d),
             top_p=torch.ones(2, device=d), seed=torch.zeros(2, dtype=torch.int64, device=d),
             step=torch.zeros(2, dtype=torch.int32, device=d))
    with pytest.raises(ts.LaunchError) as e:
        tk.sample(r(2, 0, dev=d), **p)  # call: sample
    assert_at_call(e.value, HERE, "call: sample", "`logits`", "non-empty vocabulary", "(2, 0)")
    with pytest.raises(ts.LaunchError) as e:
        tk.flash_attention(r(1, 2, 3, 8, dev=d), r(1, 2, 0, 8, dev=d), r(1, 2, 0, 8, dev=d))  # call: flash
    assert_at_call(e.value, HERE, "call: flash", "k and v have no keys", "sequence length 0")
    with pytest.raises(ts.LaunchError) as e:
        tk.linear_argmax(r(2, 0, dev=d), r(5, 0, dev=d))  # call: argmax K
    assert_at_call(e.value, HERE, "call: argmax K", "K = 0", "(2, 0)", "(5, 0)")
    with pytest.raises(ts.LaunchError) as e:
        tk.linear_argmax(r(2, 4, dev=d), r(0, 4, dev=d))  # call: argmax N
    assert_at_call(e.value, HERE, "call: argmax N", "w has 0 rows")
    with pytest.raises(ts.LaunchError) as e:
        tk.decode_attention(r(4, 8, dev=d), r(2, 0, 8, dev=d), r(2, 0, 8, dev=d), 0)  # call: decode
    assert_at_call(e.value, HERE, "call: decode", "seq_len 0", "max_seq")
    with pytest.raises(ts.LaunchError) as e:
        tk.decode_attention(r(0, 8, dev=d), r(0, 5, 8, dev=d), r(0, 5, 8, dev=d), 3)  # call: heads
    assert_at_call(e.value, HERE, "call: heads", "the 0 KV heads")
    with pytest.raises(ts.LaunchError) as e:
        tk.max(r(0, 4, dev=d), dim=0)  # call: max
    assert_at_call(e.value, HERE, "call: max", "max", "axis reduced is empty", "(0, 4)")


def test_sum_and_mean_over_an_empty_axis_are_torchs(backend, device):
    for reduce, oracle in ((tk.sum, torch.sum), (tk.mean, torch.mean)):
        for shape, dim in (((3, 0), -1), ((0, 4), 0), ((0, 4), 1)):
            x = r(*shape, dev=device)
            want = oracle(x.cpu(), dim)
            out = poisoned(want.shape, torch.float32, device)
            assert reduce(x, dim=dim, out=out) is out
            assert_close(out, want, "f32")


def test_a_k0_product_looks_up_no_config(backend, device, monkeypatch):
    """On a GPU the GEMM and GEMV configs come from the config model and first-use tuning,
    which tile K (and divided by zero at K = 0); an empty sum needs neither: the call asks
    for no `linear` or `matmul` config."""
    real = configs.lookup

    def lookup(kind, *a, **k):
        assert kind not in ("linear", "matmul"), f"K = 0 looked up a {kind} config"
        return real(kind, *a, **k)
    monkeypatch.setattr(configs, "lookup", lookup)
    for m in (1, 3, 40):
        x, w, b = r(m, 0, dev=device), r(6, 0, dev=device), r(6, dev=device)
        out = poisoned((m, 6), torch.float32, device)
        assert tk.linear(x, w, b, activation="silu", out=out) is out
        assert_close(out, F.silu(r(6).expand(m, 6)), "f32")
        y = tk.matmul(x, w.T)
        assert_close(y, torch.zeros(m, 6), "f32")


def test_decode_tiling_of_an_empty_cache_is_one_split(backend, device):
    """The GPU's decode config has no fixed `splits`: decode_tiling cuts max_seq into
    splits, and at max_seq 0 divided by zero (decode_workspace, hence decode_attention over
    an empty cache with a tensor seq_len, crashed before any launch)."""
    gpu_like = {"block_n": 64, "splits": None, "target_blocks": 264}
    assert decode_tiling(gpu_like, 8, 0) == (16, 1)
    for max_seq in (1, 100, 4096):                               # unchanged for real caches
        bn, splits = decode_tiling(gpu_like, 8, max_seq)
        per = math.ceil(math.ceil(max_seq / splits) / bn) * bn
        assert 1 <= splits and (splits - 1) * per < max_seq <= splits * per
    ws = tk.decode_workspace(r(4, 8, dev=device), r(2, 0, 8, dev=device), config={"splits": None})
    assert ws.acc.shape[0] == 1
    chosen = config_model.choose(config_model.Decode(32, 8, 0, 128, "bf16"), gpu=config_model.H200)   # the H200's pick
    assert chosen["splits"] is None and decode_tiling(chosen, 8, 0)[1] == 1
