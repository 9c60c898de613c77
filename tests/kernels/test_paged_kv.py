"""Paged KV cache kernels against oracles written here: the write against a NumPy slot
assignment, the decode attention against float64 attention over the blocks each sequence's
table names (gathered with torch), GQA, ragged lengths, a block size that is not a power of
two, out= forms; bad slot mappings refused on the host, or dropped and flagged on the device."""
import math
import os

import numpy as np
import pytest
import torch

import tilesafe as ts
from kernel_helpers import DTYPES, assert_close, f64, poisoned, randn
from tilesafe.kernels.paged_kv import (paged_decode_attention, paged_decode_workspace, paged_kv_write,
                                       report_dropped, scatter_check)

HERE = __file__


def line_of(marker: str) -> int:
    with open(HERE) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def written_ref(cache, new, slots):
    """The cache after row i of new goes to slot slots[i] (negative: nowhere)."""
    out = f64(cache).reshape(-1, *cache.shape[2:]).copy()
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            out[s] = f64(new)[i]
    return torch.from_numpy(out.reshape(cache.shape))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_write_puts_each_token_in_its_slot(backend, device, dtype):
    kc, vc = randn((6, 4, 2, 8), dtype, 1, device), randn((6, 4, 2, 8), dtype, 2, device)
    k, v = randn((7, 2, 8), dtype, 3, device), randn((7, 2, 8), dtype, 4, device)
    slots = torch.tensor([13, 2, -1, 23, 0, 9, 14], dtype=torch.int32, device=device)
    want_k, want_v = written_ref(kc, k, slots.cpu()), written_ref(vc, v, slots.cpu())
    got = paged_kv_write(kc, vc, k, v, slots)
    assert got[0] is kc and got[1] is vc
    assert_close(kc, want_k, dtype, rtol=0, atol=0)
    assert_close(vc, want_v, dtype, rtol=0, atol=0)


def test_write_of_a_wide_row_and_many_tokens(backend, device):
    """Rows wider than one column tile and more tokens than one row tile (i64 slots)."""
    kc, vc = randn((10, 3, 4, 40), "f32", 5, device), randn((10, 3, 4, 40), "f32", 6, device)
    k, v = randn((23, 4, 40), "f32", 7, device), randn((23, 4, 40), "f32", 8, device)
    slots = torch.randperm(30, generator=torch.Generator().manual_seed(0))[:23].to(device)
    want_k, want_v = written_ref(kc, k, slots.cpu()), written_ref(vc, v, slots.cpu())
    paged_kv_write(kc, vc, k, v, slots)
    assert_close(kc, want_k, "f32", rtol=0, atol=0)
    assert_close(vc, want_v, "f32", rtol=0, atol=0)


def test_host_check_refuses_a_repeated_slot_and_writes_nothing(backend, device):
    kc, vc = randn((2, 4, 1, 8), "f32", 1, device), randn((2, 4, 1, 8), "f32", 2, device)
    before = f64(kc)
    k, v = randn((3, 1, 8), "f32", 3, device), randn((3, 1, 8), "f32", 4, device)
    slots = torch.tensor([5, 1, 5], dtype=torch.int32, device=device)
    with pytest.raises(ts.LaunchError) as e:
        paged_kv_write(kc, vc, k, v, slots)  # repeated
    assert e.value.message == "entries 0 and 2 of `slot_mapping` both name row 5"
    assert e.value.loc.line == line_of("repeated")
    np.testing.assert_array_equal(f64(kc), before)
    with pytest.raises(ts.LaunchError, match="entry 1 of `slot_mapping` is 8, outside the output's 8 rows"):
        paged_kv_write(kc, vc, k, v, torch.tensor([0, 8, 1], dtype=torch.int32, device=device))


def test_device_check_drops_bad_entries_and_flags_them(backend, device):
    kc, vc = randn((2, 4, 1, 8), "f32", 1, device), randn((2, 4, 1, 8), "f32", 2, device)
    k, v = randn((5, 1, 8), "f32", 3, device), randn((5, 1, 8), "f32", 4, device)
    slots = torch.tensor([5, 1, 5, 9, -1], dtype=torch.int32, device=device)
    dropped = torch.full((5,), -3, dtype=torch.int32, device=device)
    want_k = written_ref(kc, k, torch.tensor([-1, 1, -1, -1, -1]))    # only entry 1 is good
    paged_kv_write(kc, vc, k, v, slots, check="device", dropped=dropped)
    assert_close(kc, want_k, "f32", rtol=0, atol=0)
    assert dropped.cpu().tolist() == [1, 0, 1, 1, 0]
    with pytest.raises(ts.LaunchError) as e:
        report_dropped(dropped)  # report
    assert "entry 0 of `slot_mapping` (and 2 more)" in e.value.message
    assert e.value.loc.line == line_of("report")


def test_scatter_check_flags_against_an_oracle(backend, device):
    rng = np.random.default_rng(4)
    rows = rng.integers(-2, 40, size=150)
    got = scatter_check(torch.tensor(rows, device=device), 37).cpu().numpy()
    values, counts = np.unique(rows[rows >= 0], return_counts=True)
    twice = set(values[counts > 1].tolist())
    want = [int(r >= 37 or (r >= 0 and r in twice)) for r in rows.tolist()]
    assert got.tolist() == want


# --- decode attention ---------------------------------------------------------------------------
def paged_ref(q, kc, vc, tables, lens, scale=None):
    """float64 attention of q (B, H, D) over each sequence's first lens[b] cache positions."""
    q = torch.as_tensor(f64(q))
    kflat = torch.as_tensor(f64(kc)).reshape(-1, *kc.shape[2:])
    vflat = torch.as_tensor(f64(vc)).reshape(-1, *vc.shape[2:])
    bs, group = kc.shape[1], q.shape[1] // kc.shape[2]
    out = []
    for b, n in enumerate(lens.tolist()):
        slots = torch.tensor([int(tables[b, p // bs]) * bs + p % bs for p in range(n)])
        k = kflat[slots].transpose(0, 1).repeat_interleave(group, 0)     # (H, n, D)
        v = vflat[slots].transpose(0, 1).repeat_interleave(group, 0)
        s = (q[b][:, None, :] @ k.transpose(1, 2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
        out.append((torch.softmax(s, -1) @ v)[:, 0])                   # (H, D)
    return torch.stack(out)


@pytest.mark.parametrize("heads,kv_heads,dim,block,dtype", [(4, 2, 8, 4, "f32"), (6, 1, 16, 3, "f16"),
                                                            (2, 2, 12, 16, "f32")])
def test_paged_decode_matches_attention_over_the_gathered_blocks(backend, device, dtype, heads, kv_heads, dim,
                                                                  block):
    nb, b = 12, 3
    q = randn((b, heads, dim), dtype, 1, device)
    kc, vc = randn((nb, block, kv_heads, dim), dtype, 2, device), randn((nb, block, kv_heads, dim), dtype, 3, device)
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(block))
    tables = perm[:12].reshape(b, 4).to(torch.int32).to(device)          # each sequence: 4 blocks
    lens = torch.tensor([4 * block - 1, 1, 2 * block + 1], dtype=torch.int32, device=device)
    out = poisoned((b, heads, dim), dtype, device)
    got = paged_decode_attention(q, kc, vc, tables, lens, out=out)
    assert got is out
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "f32" else dict(rtol=1e-2, atol=1e-2)
    assert_close(got, paged_ref(q, kc, vc, tables.cpu(), lens.cpu()), dtype, **tol)


def test_paged_decode_reuses_a_workspace_and_ignores_table_entries_past_the_length(backend, device):
    q = randn((2, 4, 8), "f32", 1, device)
    kc, vc = randn((8, 4, 2, 8), "f32", 2, device), randn((8, 4, 2, 8), "f32", 3, device)
    tables = torch.tensor([[3, 5, 99, -7], [0, 1, 2, 7]], dtype=torch.int64, device=device)   # junk past len
    ws = paged_decode_workspace(q, kc, max_len=4 * 4, splits=3)
    for lens in ([6, 16], [8, 3]):
        lt = torch.tensor(lens, dtype=torch.int32, device=device)
        got = paged_decode_attention(q, kc, vc, tables, lt, workspace=ws, scale=0.3)
        assert_close(got, paged_ref(q, kc, vc, tables.cpu(), lt.cpu(), scale=0.3), "f32", rtol=1e-4, atol=1e-5)


def test_bad_arguments_are_refused_before_any_work(backend, device):
    q = randn((2, 3, 8), "f32", 1, device)
    kc = randn((4, 4, 2, 8), "f32", 2, device)
    tables = torch.zeros((2, 2), dtype=torch.int32, device=device)
    lens = torch.ones(2, dtype=torch.int32, device=device)
    with pytest.raises(ts.LaunchError, match="the 2 KV heads must divide the 3 query heads"):
        paged_decode_attention(q, kc, kc.clone(), tables, lens)
    q = randn((2, 4, 8), "f32", 1, device)
    with pytest.raises(ts.LaunchError, match=r"`seq_lens` must be \(2,\)"):
        paged_decode_attention(q, kc, kc.clone(), tables, lens[:1])
    with pytest.raises(ts.LaunchError, match="`block_tables` has dtype f32"):
        paged_decode_attention(q, kc, kc.clone(), tables.float(), lens)
    with pytest.raises(ts.AliasError):
        paged_decode_attention(q, kc, kc.clone(), tables, lens, out=kc.view(-1)[:64].view(2, 4, 8))
    with pytest.raises(ts.LaunchError, match="needs caches"):
        paged_kv_write(kc, kc.clone(), randn((3, 2, 4), "f32", 1, device), randn((3, 2, 4), "f32", 1, device),
                       torch.zeros(3, dtype=torch.int32, device=device))
    with pytest.raises(ts.LaunchError, match="dropped= goes with check='device'"):
        paged_kv_write(kc, kc.clone(), randn((3, 2, 8), "f32", 1, device), randn((3, 2, 8), "f32", 1, device),
                       torch.zeros(3, dtype=torch.int32, device=device), dropped=torch.zeros(3, dtype=torch.int32))


@pytest.mark.parametrize("heads,kv_heads,dim,splits,config", [         # GQA 1, 4 and 8; head_dim 64 and 128
    (2, 2, 64, 1, None), (8, 1, 64, 4, None), (2, 2, 128, 4, {"one_kernel": False}),
    (8, 2, 64, 4, {"min_keys": 128, "prefetch": True}), (2, 2, 64, 1, {"prefetch": True, "block_n": 16})])
def test_paged_decode_forms_at_short_and_long_lengths(backend, device, heads, kv_heads, dim, splits, config):
    """One split (each block writes its heads' output), splits combined by the last block of
    each (sequence, KV head) (the CPU default) or by a second kernel, splits of at least 128
    keys, and the loop that reads the next tile before this one's math (`prefetch`): ragged
    lengths from one key (only the first split has keys) to several tiles per split."""
    nb, bs, b = 8, 32, 3
    q = randn((b, heads, dim), "f32", 1, device)
    kc, vc = randn((nb, bs, kv_heads, dim), "f32", 2, device), randn((nb, bs, kv_heads, dim), "f32", 3, device)
    tables = torch.tensor([[7, 2, 5, 0, 1, 3, 4, 6], [1, 0, 0, 0, 0, 0, 0, 0], [6, 4, 2, 0, 0, 0, 0, 0]],
                          dtype=torch.int32, device=device)
    lens = torch.tensor([250, 1, 77], dtype=torch.int32, device=device)
    ws = paged_decode_workspace(q, kc, splits=splits)
    assert ws.splits == splits and (ws.acc is None) == (splits == 1)
    out = poisoned((b, heads, dim), "f32", device)
    paged_decode_attention(q, kc, vc, tables, lens, out=out, workspace=ws, config=config)
    assert_close(out, paged_ref(q, kc, vc, tables.cpu(), lens.cpu()), "f32", rtol=1e-4, atol=1e-5)


def launched(monkeypatch):
    import tilesafe.kernels.launch as kernel_launch
    seen = []
    real = kernel_launch.start

    def start(kernel, *args, **kwargs):
        seen.append(kernel.name)
        return real(kernel, *args, **kwargs)
    monkeypatch.setattr(kernel_launch, "start", start)
    return seen


@pytest.mark.parametrize("splits,config,want", [
    (1, None, ["paged_decode_single_kernel"]), (3, {"one_kernel": True}, ["paged_decode_last_kernel"]),
    (3, {"one_kernel": False}, ["paged_decode_kernel", "decode_combine_kernel"])])
def test_paged_decode_launches(backend, device, monkeypatch, splits, config, want):
    """One split has no scratch and no combination: one launch (the old code always launched
    two); more splits combine in a second kernel or in the last block."""
    q = randn((2, 4, 8), "f32", 1, device)
    kc, vc = randn((4, 8, 2, 8), "f32", 2, device), randn((4, 8, 2, 8), "f32", 3, device)
    tables = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=device)
    lens = torch.tensor([16, 5], dtype=torch.int32, device=device)
    ws = paged_decode_workspace(q, kc, splits=splits)
    seen = launched(monkeypatch)
    got = paged_decode_attention(q, kc, vc, tables, lens, workspace=ws, config=config)
    assert seen == want
    assert_close(got, paged_ref(q, kc, vc, tables.cpu(), lens.cpu()), "f32", rtol=1e-4, atol=1e-5)


def test_paged_split_counts_follow_the_rows_the_length_and_the_sms():
    from tilesafe.kernels.attention_model import PAGED_MIN_KEYS, paged_splits
    assert paged_splits(8, 4352, 64, 132) == 32                      # batch 1, 8 KV heads: 256 blocks
    assert paged_splits(8, 160, 64, 132) == 2                        # a short cache: splits of >= 64 keys
    assert paged_splits(256, 4352, 64, 132) == 1                     # batch 32 x 8 KV heads: the rows alone
    assert paged_splits(64, 4352, 64, 132) == 4
    assert paged_splits(24, 4352, 64, 132) == 8                      # 11 would fit: a power of two
    assert paged_splits(8, 64, 64, 132) == 1 and PAGED_MIN_KEYS == 64


def test_paged_decode_bad_config_and_splits(backend, device):
    q = randn((2, 4, 8), "f32", 1, device)
    kc = randn((4, 4, 2, 8), "f32", 2, device)
    tables = torch.zeros((2, 2), dtype=torch.int32, device=device)
    lens = torch.ones(2, dtype=torch.int32, device=device)
    with pytest.raises(ts.LaunchError) as e:
        paged_decode_attention(q, kc, kc.clone(), tables, lens, config={"block_m": 16})  # key
    assert e.value.message.endswith("config key 'block_m' is not used by the paged decode")
    assert e.value.loc.line == line_of("key")
    with pytest.raises(ts.LaunchError, match=r"config min_keys=0 is not a positive int"):
        paged_decode_attention(q, kc, kc.clone(), tables, lens, config={"min_keys": 0})
    with pytest.raises(ts.LaunchError, match=r"config prefetch=1 is not True or False"):
        paged_decode_attention(q, kc, kc.clone(), tables, lens, config={"prefetch": 1})
    with pytest.raises(ts.LaunchError) as e:
        paged_decode_workspace(q, kc, splits=0)  # splits
    assert e.value.message.endswith("splits must be a positive int or None, got 0")
    assert e.value.loc.line == line_of("splits")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                    reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")
def test_kernels_compile_for_hopper_at_a_qwen3_layout():
    """bf16, 32 sequences, 32 query and 8 KV heads of 128, blocks of 16: each kernel compiles
    for sm_90 on this machine; the decode's q k^T and p v run on tensor cores, and the
    one-launch form takes its tickets with a GPU-scope atomic."""
    from tilesafe.kernels.paged_kv import (paged_decode_kernel, paged_decode_last_kernel, paged_decode_single_kernel,
                                           paged_kv_write_kernel, scatter_check_kernel)
    S, f32 = ts.spec, ts.f32
    b, hkv, g, d, slots = 32, 8, 4, 128, 4096 * 16
    part = S((4, b * hkv * g, d), f32, tile=(1, g, d)), S((4, b * hkv * g, 1), f32, tile=(1, g, 1))
    ins = (S((b * hkv, g, d), ts.bf16), S((slots, hkv, d), ts.bf16), S((slots, hkv, d), ts.bf16), S((b, 64), ts.i32),
           S((b,), ts.i32))
    kw = dict(qk_scale=0.1, block_size=16, NEG_SCALE=False, GP=16, BN=64, target="sm_90")
    heads = S((b * hkv, g, d), ts.bf16, tile=(1, g, d))
    assert "mma" in paged_decode_kernel.compile(*part, part[1], *ins, MINK=64, PREFETCH=True, **kw).asm["ptx"]
    ptx = paged_decode_last_kernel.compile(heads, *part, part[1], *ins, MINK=64, PREFETCH=False, **kw).asm["ptx"]
    assert "mma" in ptx and "atom.global.gpu.acq_rel" in ptx
    assert "mma" in paged_decode_single_kernel.compile(heads, *ins, PREFETCH=False, **kw).asm["ptx"]
    rows = S((slots, hkv * d), ts.bf16, tile=(8, 1024))
    assert paged_kv_write_kernel.compile(rows, rows, S((b,), ts.i64), S((b, hkv * d), ts.bf16),
                                         S((b, hkv * d), ts.bf16), target="sm_90").asm["ptx"]
    assert scatter_check_kernel.compile(S((b,), ts.i32, tile=(32,)), S((b,), ts.i64), n_rows=slots,
                                        target="sm_90").asm["ptx"]


def test_the_many_rows_rule_follows_the_rows_the_splits_and_the_cache_length():
    """Measured on the H200 (attention_model.paged_rule): many rows in one split take 32-key
    tiles, many rows in splits combine in the last block; long caches and few rows keep the
    defaults."""
    from tilesafe.kernels.attention_model import paged_rule
    assert paged_rule(1024, 256, 1) == paged_rule(256, 256, 1) == {"block_n": 32}    # batch 128 / 32 x 8 KV heads
    assert paged_rule(64, 256, 4) == {"one_kernel": True}                            # batch 8: 4 splits
    assert paged_rule(255, 256, 1) == paged_rule(8, 256, 4) == paged_rule(63, 256, 2) == {}
    assert paged_rule(1024, 4096, 1) == paged_rule(64, 4096, 4) == {}                 # unmeasured: defaults


@pytest.mark.parametrize("splits,config,want_bn,want", [
    (1, None, 32, ["paged_decode_single_kernel"]), (1, {"block_n": 16}, 16, ["paged_decode_single_kernel"]),
    (3, {"one_kernel": False}, 64, ["paged_decode_kernel", "decode_combine_kernel"])])
def test_many_rows_take_the_rule_unless_the_config_says_otherwise(backend, device, monkeypatch, splits, config,
                                                                   want_bn, want):
    """The rule's tiles launch (thresholds lowered to this small batch) and compute what the
    oracle does; a config= key wins over it."""
    import tilesafe.kernels.attention_model as am
    import tilesafe.kernels.launch as kernel_launch
    monkeypatch.setattr(am, "PAGED_NARROW_ROWS", 4)
    monkeypatch.setattr(am, "PAGED_LAST_ROWS", 4)
    seen, real = [], kernel_launch.start

    def start(kernel, outputs, grid, args, *rest, **kw):
        seen.append((kernel.name, args.get("BN")))
        return real(kernel, outputs, grid, args, *rest, **kw)
    q = randn((2, 4, 16), "f32", 1, device)                           # 2 sequences x 2 KV heads: 4 rows
    kc, vc = randn((4, 32, 2, 16), "f32", 2, device), randn((4, 32, 2, 16), "f32", 3, device)
    tables = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=device)   # caches of 64 positions
    lens = torch.tensor([64, 37], dtype=torch.int32, device=device)
    ws = paged_decode_workspace(q, kc, splits=splits)
    monkeypatch.setattr(kernel_launch, "start", start)
    got = paged_decode_attention(q, kc, vc, tables, lens, workspace=ws, config=config)
    assert [name for name, _ in seen] == want and seen[0][1] == want_bn
    assert_close(got, paged_ref(q, kc, vc, tables.cpu(), lens.cpu()), "f32", rtol=1e-4, atol=1e-5)
