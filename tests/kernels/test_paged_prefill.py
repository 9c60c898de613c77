"""`paged_prefill_attention` against a float64 oracle written here: causal attention of a
chunk of queries (positions start ..) over every earlier key of the sequence, the keys
gathered through its block table with torch; GQA, a block size that is not a power of two,
chunks that start inside a block, out=; bad arguments refused on the host; and the kernel
compiles for Hopper at Qwen3-4B's shapes (no GPU needed)."""
import math
import os

import numpy as np
import pytest
import torch

import tilesafe as ts
from compile_launches import compile_launches
from kernel_helpers import assert_close, f64, poisoned, randn
from tilesafe.kernels import paged_prefill
from tilesafe.kernels.paged_prefill import paged_prefill_attention

HERE = __file__


def line_of(marker: str) -> int:
    with open(HERE) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def prefill_ref(q, kc, vc, table, start):
    """float64: query i (position start + i) over the sequence's keys 0 .. start + i."""
    q = torch.as_tensor(f64(q))
    kflat = torch.as_tensor(f64(kc)).reshape(-1, *kc.shape[2:])
    vflat = torch.as_tensor(f64(vc)).reshape(-1, *vc.shape[2:])
    bs, group, t = kc.shape[1], q.shape[1] // kc.shape[2], q.shape[0]
    n = start + t
    slots = torch.tensor([int(table[p // bs]) * bs + p % bs for p in range(n)])
    k = kflat[slots].transpose(0, 1).repeat_interleave(group, 0)         # (H, n, D)
    v = vflat[slots].transpose(0, 1).repeat_interleave(group, 0)
    s = q.transpose(0, 1) @ k.transpose(1, 2) / math.sqrt(q.shape[-1])   # (H, t, n)
    allowed = torch.arange(n)[None, :] <= start + torch.arange(t)[:, None]
    s = s.masked_fill(~allowed, -math.inf)
    return (torch.softmax(s, -1) @ v).transpose(0, 1)                    # (t, H, D)


@pytest.mark.parametrize("heads,kv_heads,dim,block,start,t,dtype", [
    (4, 2, 16, 4, 0, 7, "f32"),          # a whole prompt
    (4, 2, 16, 4, 9, 5, "f32"),          # a chunk starting inside a block
    (6, 3, 8, 3, 20, 17, "f32"),         # block size 3, more queries than one tile
    (2, 1, 16, 16, 70, 3, "f16"),        # a long prefix, several key tiles unmasked
    (8, 2, 16, 4, 5, 1, "f32"),          # one query, a group of 4 in one block (4 rows each)
    (8, 2, 16, 4, 3, 40, "f32"),         # a group of 4 over several query tiles
    (6, 2, 8, 4, 2, 9, "f32"),           # a group of 3 (not a power of two): a head per block
])
def test_chunk_attends_its_prefix_through_the_table(backend, device, dtype, heads, kv_heads, dim, block, start, t):
    nb = -(-(start + t) // block) + 3
    kc, vc = randn((nb, block, kv_heads, dim), dtype, 1, device), randn((nb, block, kv_heads, dim), dtype, 2, device)
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(block)).to(torch.int32)
    tables = torch.stack([perm.flip(0), perm]).to(device)              # the sequence is row 1
    q = randn((t, heads, dim), dtype, 3, device)
    out = poisoned((t, heads, dim), dtype, device)
    got = paged_prefill_attention(q, kc, vc, tables, start, row=1, out=out)
    assert got is out
    want = prefill_ref(q, kc, vc, perm, start)
    assert_close(out, want, dtype, rtol=1e-3 if dtype == "f16" else 1e-5, atol=1e-3 if dtype == "f16" else 1e-5)


def test_chunks_give_the_whole_prompts_attention(backend, device):
    """A prompt's attention in chunks of 5 equals the chunk-free (start 0) call's rows."""
    kc, vc = randn((8, 4, 1, 16), "f32", 4, device), randn((8, 4, 1, 16), "f32", 5, device)
    table = torch.tensor([[6, 1, 3, 0, 7, 2]], dtype=torch.int32, device=device)
    q = randn((22, 2, 16), "f32", 6, device)
    whole = paged_prefill_attention(q, kc, vc, table, 0)
    parts = torch.cat([paged_prefill_attention(q[s:s + 5], kc, vc, table, s) for s in range(0, 22, 5)])
    assert_close(parts, whole, "f32", rtol=1e-6, atol=1e-6)


def test_bad_arguments_are_refused_at_the_call(backend, device):
    kc, vc = randn((4, 4, 1, 8), "f32", 1, device), randn((4, 4, 1, 8), "f32", 2, device)
    q = randn((3, 2, 8), "f32", 3, device)
    table = torch.tensor([[0, 1]], dtype=torch.int32, device=device)     # 8 positions
    with pytest.raises(ts.LaunchError) as e:
        paged_prefill_attention(q, kc, vc, table, 6)  # too-far
    assert e.value.message == "paged_prefill_attention: positions up to 9 do not fit a block table of 2 blocks of 4"
    assert e.value.loc.line == line_of("too-far")
    with pytest.raises(ts.LaunchError, match=r"`row` 1 is not a row of block_tables \(1, 2\)"):
        paged_prefill_attention(q, kc, vc, table, 0, row=1)
    with pytest.raises(ts.LaunchError, match="`start` must be an int >= 0, got -1"):
        paged_prefill_attention(q, kc, vc, table, -1)
    with pytest.raises(ts.LaunchError, match="the 1 KV heads must divide the 3 query heads|must divide"):
        paged_prefill_attention(randn((3, 3, 8), "f32", 3, device), randn((4, 4, 2, 8), "f32", 1, device),
                                randn((4, 4, 2, 8), "f32", 1, device), table, 0)


def test_a_kv_heads_query_heads_share_one_block(monkeypatch):
    """GQA: the blocks own all query heads of one KV head (the K/V tiles are gathered once
    for the group), as many rows as the tile allows; a group that is not a power of two
    gets a head per block."""
    tiles = []
    monkeypatch.setattr(paged_prefill, "launch", lambda kernel, outputs, **kw: tiles.append(outputs["o"][1]))
    table = torch.zeros(1, 128, dtype=torch.int32)
    for h, hkv, t in [(32, 8, 2048), (32, 8, 1), (16, 16, 100), (6, 2, 100)]:
        kc = torch.empty(8, 16, hkv, 128)
        paged_prefill_attention(torch.empty(t, h, 128), kc, kc.clone(), table, 0)
    assert tiles == [(4, 32, 128), (4, 4, 128), (1, 64, 128), (1, 64, 128)]


# --- compiles for Hopper at Qwen3-4B's shapes (bf16), no GPU needed -------------------------
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="the interpreter cannot compile")
@pytest.mark.parametrize("start,t", [(0, 2048), (4096, 512), (37, 1)])
def test_compiles_for_hopper(monkeypatch, start, t):
    from tilesafe.runtime.compile_ahead import compile_ahead
    compiled = compile_launches(monkeypatch, ["paged_prefill"], lambda kernel, specs, schedule: compile_ahead(
        kernel, **specs, arch=90, descriptors=None, schedule=schedule))
    h, hkv, d, bs = 32, 8, 128, 16
    nb = (start + t) // bs + 1
    kc = torch.empty(nb, bs, hkv, d, dtype=torch.bfloat16)
    table = torch.zeros(4, 512, dtype=torch.int32)
    paged_prefill_attention(torch.empty(t, h, d, dtype=torch.bfloat16), kc, kc.clone(), table, start, row=2)
    assert len(compiled) == 1 and compiled[0][1].metadata.shared <= 232448
    assert np.isfinite(compiled[0][1].metadata.shared)
