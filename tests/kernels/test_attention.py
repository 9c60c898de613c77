"""Flash and decode attention against a float64 softmax(q k^T) v written here: GQA and MQA,
causal and not, ragged sequences, (H, S, D) and (B, H, S, D) layouts, head dims 64 / 128
and one that is not a power of two, KV-cache lengths as ints and device tensors."""
import math

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn
from tilesafe.bench.observe import Observer
from tilesafe.kernels import attention_model as am
from tilesafe.kernels.attention import flash_kernel

ATT_TOL = {"f32": dict(rtol=1e-4, atol=1e-5), "f16": dict(rtol=1e-2, atol=1e-2), "bf16": dict(rtol=2e-2, atol=2e-2)}


def attention_ref(q, k, v, causal=False, scale=None):
    """float64 attention; q (..., H, S, D), k/v (..., HKV, SK, D); causal is top-left aligned."""
    q, k, v = (torch.as_tensor(f64(t)) for t in (q, k, v))
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_gqa_ragged(backend, device, causal, dtype):
    q = randn((4, 37, 64), dtype, 1, device)                     # 4 query heads
    k, v = randn((2, 37, 64), dtype, 2, device), randn((2, 37, 64), dtype, 3, device)   # 2 KV heads
    out = poisoned((4, 37, 64), dtype, device)
    got = tk.flash_attention(q, k, v, causal=causal, out=out)
    assert got is out
    assert_close(got, attention_ref(q, k, v, causal), dtype, **ATT_TOL[dtype])


@pytest.mark.parametrize("causal", [False, True])
def test_flash_batched_strided_mqa(backend, device, causal):
    # (B, S, H, D) projections viewed as (B, H, S, D), as a model does; one KV head (MQA).
    q = randn((2, 45, 4, 64), "f32", 4, device).transpose(1, 2)
    k = randn((2, 30, 1, 64), "f32", 5, device).transpose(1, 2)
    v = randn((2, 1, 30, 64), "f32", 6, device)
    got = tk.flash_attention(q, k, v, causal=causal, scale=0.3)
    assert got.shape == (2, 4, 45, 64)
    assert_close(got, attention_ref(q, k, v, causal, scale=0.3), "f32", **ATT_TOL["f32"])


@pytest.mark.reference_only
@pytest.mark.parametrize("d", [128, 40])
def test_flash_head_dims(backend, device, d):
    q, k, v = (randn((2, 20, d), "f32", 7 + i, device) for i in range(3))
    assert_close(tk.flash_attention(q, k, v, causal=True), attention_ref(q, k, v, True), "f32", **ATT_TOL["f32"])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_head_dim_128_half_precision_gqa(backend, device, causal, dtype):
    q = randn((1, 4, 70, 128), dtype, 13, device)                # (B, H, S, D), 4 query heads
    k, v = randn((1, 2, 70, 128), dtype, 14, device), randn((1, 2, 70, 128), dtype, 15, device)
    out = poisoned((1, 4, 70, 128), dtype, device)
    got = tk.flash_attention(q, k, v, causal=causal, out=out)
    assert got is out
    assert_close(got, attention_ref(q, k, v, causal), dtype, **ATT_TOL[dtype])


def decode_ref(q, kc, vc, length):
    return attention_ref(torch.as_tensor(f64(q))[:, None], torch.as_tensor(f64(kc))[:, :length],
                         torch.as_tensor(f64(vc))[:, :length])[:, 0]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("length", [1, 37, 100])
def test_decode_gqa(backend, device, length, dtype):
    q = randn((8, 64), dtype, 10, device)                        # 8 query heads
    kc, vc = randn((2, 100, 64), dtype, 11, device), randn((2, 100, 64), dtype, 12, device)   # 2 KV heads
    out = poisoned((8, 64), dtype, device)
    got = tk.decode_attention(q, kc, vc, length, out=out)
    assert got is out
    assert_close(got, decode_ref(q, kc, vc, length), dtype, **ATT_TOL[dtype])


def test_decode_device_length_and_workspace(backend, device):
    q = randn((4, 128), "f32", 13, device)
    kc, vc = randn((4, 70, 128), "f32", 14, device), randn((4, 70, 128), "f32", 15, device)
    kc[:, 50:] = float("nan")                                    # cache rows past the length: never used
    vc[:, 50:] = float("inf")
    ws = tk.decode_workspace(q, kc)
    length = torch.tensor([43], dtype=torch.int32, device=device)
    out = poisoned((4, 128), "f32", device)
    for n in (43, 50, 1):                                        # a new length, same buffers: no allocation
        length.fill_(n)
        tk.decode_attention(q, kc, vc, length, out=out, workspace=ws)
        assert_close(out, decode_ref(q, kc, vc, n), "f32", **ATT_TOL["f32"])


@pytest.mark.parametrize("heads,kv_heads,dim,one", [(2, 2, 64, True), (8, 2, 128, True), (8, 1, 64, False)])
def test_decode_splits_past_a_short_device_length_are_empty(backend, device, heads, kv_heads, dim, one):
    """Five splits sized for 120 keys; a device length of 1 or 20 leaves only the first one or
    two with keys (the one-kernel combination reads only those), 117 fills all five. GQA 1, 4
    and 8; head_dim 64 and 128."""
    q = randn((heads, dim), "f32", 19, device)
    kc, vc = randn((kv_heads, 120, dim), "f32", 20, device), randn((kv_heads, 120, dim), "f32", 21, device)
    cfg = {"splits": 5, "block_n": 16, "one_kernel": one}
    ws = tk.decode_workspace(q, kc, config=cfg)
    length = torch.tensor([1], dtype=torch.int32, device=device)
    for n in (1, 20, 117):
        length.fill_(n)
        out = poisoned((heads, dim), "f32", device)
        tk.decode_attention(q, kc, vc, length, out=out, workspace=ws, config=cfg)
        assert_close(out, decode_ref(q, kc, vc, n), "f32", **ATT_TOL["f32"])


@pytest.mark.reference_only
def test_decode_mqa_many_splits(backend, device):
    q = randn((32, 64), "f32", 16, device)                       # 32 heads over one KV head: GP = 32 rows
    kc, vc = randn((1, 300, 64), "f32", 17, device), randn((1, 300, 64), "f32", 18, device)
    got = tk.decode_attention(q, kc, vc, 299, config={"splits": 7, "block_n": 16})
    assert_close(got, decode_ref(q, kc, vc, 299), "f32", **ATT_TOL["f32"])


def _launched(call):
    """The flash kernels `call` launched (by name)."""
    from tilesafe.bench.observe import Observer
    from tilesafe.kernels.attention import flash_kernel, flash_rows_kernel
    with Observer([flash_kernel, flash_rows_kernel]) as seen:
        got = call()
    return got, set(seen)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_sizes_that_divide_take_the_matrix_path(backend, device, causal):
    # Sequences dividing the tiles: q, k, v are read as 2-D matrices (one TMA box per tile).
    cfg = {"block_m": 32, "block_n": 16}
    q = randn((2, 4, 64, 64), "f32", 40, device)                 # heads one under another
    k, v = randn((2, 2, 48, 64), "f32", 41, device), randn((2, 2, 48, 64), "f32", 42, device)
    got, seen = _launched(lambda: tk.flash_attention(q, k, v, causal=causal, config=cfg))
    assert seen == {"flash_rows_kernel"}
    assert_close(got, attention_ref(q, k, v, causal), "f32", **ATT_TOL["f32"])
    # (B, S, H, D) projections viewed as (B, H, S, D): heads side by side in each row; one KV head.
    qs = randn((2, 32, 4, 64), "f32", 43, device).transpose(1, 2)
    ks, vs = (randn((2, 64, 1, 64), "f32", 44 + i, device).transpose(1, 2) for i in range(2))
    got, seen = _launched(lambda: tk.flash_attention(qs, ks, vs, causal=causal, scale=-0.2, config=cfg))
    assert seen == {"flash_rows_kernel"}
    assert_close(got, attention_ref(qs, ks, vs, causal, scale=-0.2), "f32", **ATT_TOL["f32"])


@pytest.mark.reference_only
def test_flash_matrix_path_with_a_padded_head_dim_and_its_fallbacks(backend, device):
    q, k, v = (randn((3, 32, 40), "f32", 46 + i, device) for i in range(3))      # D = 40 in 64-wide tiles
    got, seen = _launched(lambda: tk.flash_attention(q, k, v, causal=True))
    assert seen == {"flash_rows_kernel"}
    assert_close(got, attention_ref(q, k, v, True), "f32", **ATT_TOL["f32"])
    wide = randn((4, 32, 40), "f32", 49, device)[::2]             # every other head: not one matrix
    got, seen = _launched(lambda: tk.flash_attention(wide, k[:2], v[:2]))
    assert seen == {"flash_kernel"}
    assert_close(got, attention_ref(wide, k[:2], v[:2]), "f32", **ATT_TOL["f32"])
    got, seen = _launched(lambda: tk.flash_attention(q, k, v, config={"flat": False}))
    assert seen == {"flash_kernel"}


@pytest.mark.parametrize("causal", [False, True])
def test_flash_ragged_lengths_through_tensor_descriptors(backend, device, causal):
    # Lengths no multiple of the tiles run the 4-D kernel, which a Hopper GPU reads through rank-4
    # TMA descriptors (attention.py forces tma=True there): the descriptors' zero fill past each
    # sequence's end and the kernel's key masks must still give the oracle's result.
    q = randn((2, 4, 33, 32), "f32", 60, device)
    k, v = randn((2, 2, 45, 32), "f32", 61, device), randn((2, 2, 45, 32), "f32", 62, device)
    with Observer([flash_kernel]) as seen:
        got = tk.flash_attention(q, k, v, causal=causal, config={"block_m": 16, "block_n": 16, "tma": True})
    assert_close(got, attention_ref(q, k, v, causal), "f32", **ATT_TOL["f32"])
    if backend != "reference":                                   # the reference has no descriptors
        assert {"q", "k", "v"} <= set(seen["flash_kernel"].tma), seen


@pytest.mark.parametrize("causal", [False, True])
def test_flash_negative_and_zero_scale(backend, device, causal):
    # The unmasked loop scales the row max, not each score: a negative scale turns it into the min.
    q, k, v = (randn((2, 40, 32), "f32", 30 + i, device) for i in range(3))
    for scale in (-0.4, 0.0):
        got = tk.flash_attention(q, k, v, causal=causal, scale=scale, config={"block_m": 16, "block_n": 16})
        assert_close(got, attention_ref(q, k, v, causal, scale=scale), "f32", **ATT_TOL["f32"])


def test_decode_group_not_a_power_of_two(backend, device):
    # 3 query heads per KV head: 16 rows computed, 4 stored per KV head, 3 of them combined.
    q = randn((6, 64), "f32", 33, device)
    kc, vc = randn((2, 70, 64), "f32", 34, device), randn((2, 70, 64), "f32", 35, device)
    ws = tk.decode_workspace(q, kc)
    assert ws.acc.shape[1:] == (2 * 4, 64)
    for n, scale in ((53, None), (70, -0.2)):
        out = poisoned((6, 64), "f32", device)
        tk.decode_attention(q, kc, vc, n, scale=scale, out=out, workspace=ws)
        want = attention_ref(torch.as_tensor(f64(q))[:, None], torch.as_tensor(f64(kc))[:, :n],
                             torch.as_tensor(f64(vc))[:, :n], scale=scale)[:, 0]
        assert_close(out, want, "f32", **ATT_TOL["f32"])


@pytest.mark.parametrize("one", [True, False], ids=["one-kernel", "two-kernels"])
@pytest.mark.parametrize("flat", [True, False], ids=["matrices", "3d"])
@pytest.mark.parametrize("length", [1, 37, 64])
def test_decode_caches_read_as_matrices(backend, device, length, flat, one):
    """Both cache readings, each with the splits combined by the last block of each KV head
    (`one_kernel`, S16) or by a second kernel."""
    from tilesafe.bench.observe import Observer
    from tilesafe.kernels import attention as at
    kernels = [at.decode_partial_kernel, at.decode_rows_kernel, at.decode_last_kernel, at.decode_rows_last_kernel,
               at.decode_combine_kernel]
    q = randn((8, 64), "f32", 50, device)
    kc, vc = randn((2, 64, 64), "f32", 51, device), randn((2, 64, 64), "f32", 52, device)   # one matrix per cache
    kt, vt = (randn((64, 2, 64), "f32", 53 + i, device).transpose(0, 1) for i in range(2))  # (max_seq, HKV, D) storage
    want = {(True, True): ["decode_rows_last_kernel"], (True, False): ["decode_last_kernel"],
            (False, True): ["decode_rows_kernel", "decode_combine_kernel"],
            (False, False): ["decode_partial_kernel", "decode_combine_kernel"]}[one, flat]
    for k, v in ((kc, vc), (kt, vt)):
        out = poisoned((8, 64), "f32", device)
        with Observer(kernels) as seen:
            tk.decode_attention(q, k, v, torch.tensor([length], device=device), out=out,
                                config={"flat": flat, "one_kernel": one, "splits": 3})
        assert list(seen) == want
        assert_close(out, decode_ref(q, k, v, length), "f32", **ATT_TOL["f32"])


@pytest.mark.reference_only
def test_decode_splits_fill_the_gpu_without_empty_ones(backend, device):
    # The GPU default: (KV heads x splits) >= 264 blocks wanted, each a whole number of key tiles;
    # 4096 keys over 8 KV heads: 128 keys per split, so 32 splits (33 would leave one empty).
    cfg = {"block_n": 64, "splits": None, "target_blocks": 264}
    q, kc = randn((32, 16), "f32", 36, device), randn((8, 4096, 16), "f32", 37, device)
    assert tk.decode_workspace(q, kc, config=cfg).acc.shape == (32, 8 * 4, 16)
    assert tk.decode_workspace(q[:16], kc[:2, :1000], config=cfg).acc.shape == (16, 2 * 8, 16)   # 64 keys each


@pytest.mark.reference_only
def test_decode_splits_never_spill_into_a_second_round(backend, device):
    # 25 KV heads (MHA) over 10918 keys, 264 block slots: 10 splits (250 blocks). Rounding the
    # split count up gave 11 (275 blocks), whose last 11 ran alone in a second round.
    cfg = {"block_n": 128, "splits": None, "target_blocks": 264}
    q, kc = randn((25, 16), "f32", 38, device), randn((25, 10918, 16), "f32", 39, device)
    assert tk.decode_workspace(q, kc, config=cfg).acc.shape == (10, 25, 16)
    assert am.decode_splits(dict(cfg), am.Decode(25, 25, 10918, 16, "f32")) == (128, 10)   # the model agrees


@pytest.mark.reference_only
def test_errors(backend, device):
    q, k = randn((4, 8, 16), "f32", 19, device), randn((3, 8, 16), "f32", 20, device)
    with pytest.raises(ts.LaunchError, match="KV heads\n?.*must divide|must divide"):
        tk.flash_attention(q, k, k)
    with pytest.raises(ts.LaunchError, match="no keys"):
        tk.flash_attention(q, q[:, :0], q[:, :0])
    kc = randn((2, 10, 16), "f32", 21, device)
    with pytest.raises(ts.LaunchError, match=r"seq_len 11 must be in 1..10"):
        tk.decode_attention(q[:, 0], kc, kc, 11)
    with pytest.raises(ts.LaunchError, match="seq_len must be an int or a one-element tensor"):
        tk.decode_attention(q[:, 0], kc, kc, torch.tensor([1, 2], device=device))
