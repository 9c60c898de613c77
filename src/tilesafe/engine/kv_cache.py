"""The KV caches: the offline engine's slot per sequence (`KVCache`) and the serving
engine's pool of shared blocks (`PagedKVCache`, below).

`KVCache`: one preallocated key and one value buffer per layer.

Each buffer is (max_num_seqs, max_model_len, HKV, D): a sequence of a batch owns one slot
(the first axis) for its whole life, so a decode step writes and reads fixed addresses and
can be captured once per batch size and replayed. It is the paged layout of
`tk.paged_kv_write` / `tk.paged_decode_attention` (num_blocks, block_size, HKV, D) with one
block of max_model_len positions per slot: position p of slot i is cache row i * L + p, and
slot i's block table is [i]. So one write and one attention launch per layer serve the whole
batch, each sequence at its own position and length (read on the device). The buffers start
zeroed: attention reads only the first `length` rows of a slot, but a tile may span rows
nobody wrote yet (S14).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import Qwen3Config


@dataclass(slots=True)
class KVCache:
    k: list[torch.Tensor]      # per layer (S, L, HKV, D)
    v: list[torch.Tensor]      # per layer (S, L, HKV, D)
    max_num_seqs: int
    max_model_len: int

    @classmethod
    def allocate(cls, cfg: Qwen3Config, max_num_seqs: int, max_model_len: int, dtype, device) -> "KVCache":
        shape = (max_num_seqs, max_model_len, cfg.num_kv_heads, cfg.head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        return cls(k, v, max_num_seqs, max_model_len)


def cache_bytes(cfg: Qwen3Config, max_num_seqs: int, max_model_len: int, itemsize: int) -> int:
    """Bytes `KVCache.allocate` will take (keys and values of every layer)."""
    return 2 * cfg.num_layers * max_num_seqs * cfg.num_kv_heads * max_model_len * cfg.head_dim * itemsize


@dataclass(slots=True)
class PagedKVCache:
    """A pool of blocks shared by every sequence (the serving engine's cache): per layer
    (num_blocks, block_size, HKV, D) for keys and for values. A sequence's position p lives
    in row table[p // block_size] * block_size + p % block_size, its block table kept by the
    scheduler's block manager; prefill writes and decode reads go through those tables."""
    k: list[torch.Tensor]      # per layer (num_blocks, block_size, HKV, D)
    v: list[torch.Tensor]
    num_blocks: int
    block_size: int
    max_model_len: int         # positions one sequence may have (sets the decode attention's splits)

    @classmethod
    def allocate(cls, cfg: Qwen3Config, num_blocks: int, block_size: int, max_model_len: int, dtype,
                 device) -> "PagedKVCache":
        shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        return cls(k, v, num_blocks, block_size, max_model_len)

    @classmethod
    def over(cls, cache: KVCache, num_blocks: int, block_size: int) -> "PagedKVCache | None":
        """The first `num_blocks` blocks of a slot cache's own buffers (no new memory), or
        None when they do not hold that many blocks of `block_size` positions."""
        k0 = cache.k[0]
        if not k0.is_contiguous() or k0.numel() % (block_size * k0.shape[2] * k0.shape[3]) \
                or cache.max_num_seqs * cache.max_model_len < num_blocks * block_size:
            return None

        def blocks(t: torch.Tensor) -> torch.Tensor:
            return t.view(-1, block_size, t.shape[2], t.shape[3])[:num_blocks]
        return cls([blocks(t) for t in cache.k], [blocks(t) for t in cache.v], num_blocks, block_size,
                   cache.max_model_len)
