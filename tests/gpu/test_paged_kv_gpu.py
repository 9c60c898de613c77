"""Paged KV kernels through Triton on the GPU: bf16 at a Qwen3-like head layout against
float64 oracles written here, and a decode step (paged write with the device-side check,
then paged attention) captured in one CUDA graph and replayed with new slot mappings,
tables and lengths copied into its buffers."""
import math

import numpy as np
import pytest
import torch

import tilesafe as ts
from tilesafe.kernels.paged_kv import (paged_decode_attention, paged_decode_workspace, paged_kv_write,
                                       report_dropped)

pytestmark = pytest.mark.gpu

B, H, HKV, D, BS, NB, MB = 8, 32, 8, 128, 16, 256, 16     # 8 sequences of up to 256 positions


@pytest.fixture(autouse=True)
def _triton():
    with ts.backend("triton"):
        yield


def oracle(q, kc, vc, tables, lens):
    """float64 attention of q (B, H, D) over each sequence's first lens[b] positions."""
    q, kc, vc = (t.double().cpu() for t in (q, kc, vc))
    kf, vf = kc.reshape(-1, HKV, D), vc.reshape(-1, HKV, D)
    out = []
    for b, n in enumerate(lens.tolist()):
        slots = torch.tensor([int(tables[b, p // BS]) * BS + p % BS for p in range(n)])
        k = kf[slots].transpose(0, 1).repeat_interleave(H // HKV, 0)      # (H, n, D)
        v = vf[slots].transpose(0, 1).repeat_interleave(H // HKV, 0)
        s = q[b][:, None, :] @ k.transpose(1, 2) / math.sqrt(D)
        out.append((torch.softmax(s, -1) @ v)[:, 0])
    return torch.stack(out)


def tables_and_lens(seed):
    g = torch.Generator().manual_seed(seed)
    tables = torch.randperm(NB, generator=g)[:B * MB].reshape(B, MB).to(torch.int32)
    lens = torch.randint(1, MB * BS + 1, (B,), generator=g, dtype=torch.int32)
    return tables, lens


def test_bf16_decode_against_float64():
    q = torch.randn(B, H, D, device="cuda").bfloat16()
    kc, vc = (torch.randn(NB, BS, HKV, D, device="cuda").bfloat16() for _ in range(2))
    tables, lens = tables_and_lens(0)
    got = paged_decode_attention(q, kc, vc, tables.cuda(), lens.cuda())
    torch.testing.assert_close(got.double().cpu(), oracle(q, kc, vc, tables, lens), rtol=2e-2, atol=2e-2)


def test_bf16_write_of_a_prefill_sized_step():
    kc, vc = (torch.randn(NB, BS, HKV, D, device="cuda").bfloat16() for _ in range(2))
    want_k, want_v = kc.clone().reshape(-1, HKV, D), vc.clone().reshape(-1, HKV, D)
    t = 1000
    slots = torch.randperm(NB * BS, device="cuda")[:t]
    k, v = (torch.randn(t, HKV, D, device="cuda").bfloat16() for _ in range(2))
    paged_kv_write(kc, vc, k, v, slots)
    want_k[slots], want_v[slots] = k, v
    assert torch.equal(kc.reshape(-1, HKV, D), want_k) and torch.equal(vc.reshape(-1, HKV, D), want_v)


def test_a_captured_decode_step_replays_with_new_tables():
    q = ts.from_torch(torch.randn(B, H, D, device="cuda").bfloat16())
    kc = ts.from_torch(torch.randn(NB, BS, HKV, D, device="cuda").bfloat16())
    vc = ts.from_torch(torch.randn(NB, BS, HKV, D, device="cuda").bfloat16())
    k_new = ts.from_torch(torch.randn(B, HKV, D, device="cuda").bfloat16())
    v_new = ts.from_torch(torch.randn(B, HKV, D, device="cuda").bfloat16())
    tables, lens = ts.zeros((B, MB), ts.i32, "cuda"), ts.ones((B,), ts.i32, "cuda")
    slots, dropped = ts.zeros((B,), ts.i32, "cuda"), ts.zeros((B,), ts.i32, "cuda")
    out, ws = ts.empty((B, H, D), ts.bf16, "cuda"), paged_decode_workspace(q, kc, max_len=MB * BS)

    def step():
        paged_kv_write(kc, vc, k_new, v_new, slots, check="device", dropped=dropped)
        paged_decode_attention(q, kc, vc, tables, lens, out=out, workspace=ws)

    slots.copy_(np.arange(B, dtype=np.int32))
    step()                                          # eager first: compiles every kernel
    with ts.graph() as g:
        step()
    for seed in range(3):
        t, n = tables_and_lens(seed + 1)
        last = (t[torch.arange(B), (n - 1) // BS] * BS + (n - 1) % BS).to(torch.int32)   # each new token's slot
        tables.copy_(t.numpy())
        lens.copy_(n.numpy())
        slots.copy_(last.numpy())
        g.replay()
        report_dropped(dropped)
        kt, vt = (x.to_torch(copy=True) for x in (kc, vc))
        assert torch.equal(kt.reshape(-1, HKV, D)[last.long().cuda()], k_new.to_torch(copy=True))
        want = oracle(q.to_torch(copy=True), kt, vt, t, n)
        torch.testing.assert_close(out.to_torch(copy=True).double().cpu(), want, rtol=2e-2, atol=2e-2)


def test_the_host_check_is_refused_inside_a_capture():
    """check='host' reads the slot mapping on the host, which a capture cannot: a LaunchError
    that points at check='device'."""
    kc, vc = (torch.randn(4, BS, HKV, D, device="cuda").bfloat16() for _ in range(2))
    k, v = (torch.randn(4, HKV, D, device="cuda").bfloat16() for _ in range(2))
    slots = torch.arange(4, dtype=torch.int32, device="cuda")
    paged_kv_write(kc, vc, k, v, slots)                            # eager: compiles
    with pytest.raises(ts.LaunchError, match="which a CUDA graph capture cannot do") as e:
        with ts.graph():
            paged_kv_write(kc, vc, k, v, slots)
    assert "scatter_check" in e.value.help


@pytest.mark.parametrize("splits,config", [(1, None), (33, None), (33, {"one_kernel": True, "min_keys": 128}),
                                           (8, {"prefetch": True}), (1, {"prefetch": True, "block_n": 128})])
def test_bf16_decode_forms_against_float64(splits, config):
    """One split (a block per (sequence, KV head) writes the output), 33 splits (most of them
    without keys at these lengths) combined by a second kernel or by the last block, the loop
    that reads the next tile before this one's math, 128-key tiles; lengths from 1 to the
    whole table."""
    q = torch.randn(B, H, D, device="cuda").bfloat16()
    kc, vc = (torch.randn(NB, BS, HKV, D, device="cuda").bfloat16() for _ in range(2))
    tables, lens = tables_and_lens(7)
    lens[0], lens[1] = 1, MB * BS
    ws = paged_decode_workspace(q, kc, splits=splits)
    out = torch.full_like(q, float("nan"))
    paged_decode_attention(q, kc, vc, tables.cuda(), lens.cuda(), out=out, workspace=ws, config=config)
    torch.testing.assert_close(out.double().cpu(), oracle(q, kc, vc, tables, lens), rtol=2e-2, atol=2e-2)


def test_a_captured_one_launch_decode_replays_as_lengths_grow():
    """The engine's case: a graph captured once (workspace sized for the whole table) replays
    while each sequence's length grows from 1 past several splits' keys; the number of splits
    with keys is read on the device at every replay."""
    qt = torch.randn(B, H, D, device="cuda").bfloat16()
    kt, vt = (torch.randn(NB, BS, HKV, D, device="cuda").bfloat16() for _ in range(2))
    q, kc, vc = ts.from_torch(qt), ts.from_torch(kt), ts.from_torch(vt)
    t, _ = tables_and_lens(3)
    tables, lens = ts.zeros((B, MB), ts.i32, "cuda"), ts.ones((B,), ts.i32, "cuda")
    tables.copy_(t.numpy())
    out, ws = ts.empty((B, H, D), ts.bf16, "cuda"), paged_decode_workspace(q, kc, max_len=MB * BS)
    assert ws.splits > 1
    paged_decode_attention(q, kc, vc, tables, lens, out=out, workspace=ws)      # eager first: compiles
    with ts.graph() as g:
        paged_decode_attention(q, kc, vc, tables, lens, out=out, workspace=ws)
    for n in (1, 63, 64, 65, 130, 200, MB * BS):
        n_b = torch.tensor([max(1, n - 3 * i) for i in range(B)], dtype=torch.int32)
        lens.copy_(n_b.numpy())
        g.replay()
        torch.testing.assert_close(out.to_torch(copy=True).double().cpu(), oracle(qt, kt, vt, t, n_b), rtol=2e-2,
                                   atol=2e-2)


def test_bf16_decode_of_many_rows_in_a_short_cache():
    """32 sequences x 8 KV heads (256 rows) in one split over a 256-position cache: the
    measured rule's 32-key tiles (attention_model.paged_rule), lengths 1 to the whole table,
    against float64."""
    b, nb = 32, 32 * MB
    g = torch.Generator().manual_seed(3)
    tables = torch.randperm(nb, generator=g)[:b * MB].reshape(b, MB).to(torch.int32)
    lens = torch.randint(1, MB * BS + 1, (b,), generator=g, dtype=torch.int32)
    lens[0], lens[1] = 1, MB * BS
    q = torch.randn(b, H, D, device="cuda").bfloat16()
    kc, vc = (torch.randn(nb, BS, HKV, D, device="cuda").bfloat16() for _ in range(2))
    ws = paged_decode_workspace(q, kc, splits=1)
    got = paged_decode_attention(q, kc, vc, tables.cuda(), lens.cuda(), workspace=ws)
    torch.testing.assert_close(got.double().cpu(), oracle(q, kc, vc, tables, lens), rtol=2e-2, atol=2e-2)
