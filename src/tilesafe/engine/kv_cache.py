"""The KV cache: one preallocated key and one value buffer per layer.

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
