"""The serving engine's device memory, counted before anything is allocated: the KV pool
(unless it reuses the offline engine's cache) and the buffers its step forms hold — every
decode bucket's activations, the mixed steps' shared activations (their largest row
bucket), the split steps' prefill graphs. A server that does not fit is refused with each
part named, not left to fail at its first large step."""
from __future__ import annotations

import dataclasses

import torch

from ..engine.decode_step import bucket_sizes as decode_buckets
from ..engine.errors import request_error
from ..engine.kv_cache import cache_bytes
from ..engine.model import Activations
from ..engine.prefill_graphs import MAX_GRAPH_TOKENS, buffer_bytes as prefill_graph_bytes
from .prefill_pack import rows_bucket, token_bucket

GIB = 2 ** 30


def activation_bytes(cfg, m: int, r: int, dtype) -> int:
    """Device bytes of `Activations.allocate(cfg, m, r)` (made on the meta device; views once)."""
    a = Activations.allocate(cfg, m, r, dtype, "meta")
    tensors = [getattr(a, f.name) for f in dataclasses.fields(a)]
    return sum(t.numel() * t.element_size() for t in tensors if t._base is None)


def serving_bytes(llm, pool_blocks: int | None, block_size: int, max_chunk: int, split_prefill: bool,
                  mixed_chunks: int, pad_decode: bool = True) -> dict[str, int]:
    """What ModelRunner allocates, by part: a KV pool of its own of `pool_blocks` blocks (None:
    the engine's cache reused, as blocks of `block_size` positions all the same), the decode
    buckets (each its activations and block tables), the mixed steps of up to `mixed_chunks`
    fresh chunks of up to `max_chunk` tokens (0: none), the prefill graphs of a split step
    (`split_prefill`)."""
    cfg, dtype, seqs = llm.config, llm.dtype, llm.max_num_seqs
    size = torch.empty((), dtype=dtype).element_size()
    need = {}
    if pool_blocks is not None:
        need["KV blocks"] = cache_bytes(cfg, pool_blocks, block_size, size)   # pool_blocks "slots" of block_size rows
    width = -(-llm.max_model_len // block_size)                      # a block table's entries
    buckets = decode_buckets(seqs) if pad_decode else [seqs]
    need["decode steps"] = sum(activation_bytes(cfg, b, b, dtype) + 4 * b * width for b in buckets)
    if mixed_chunks:
        chunks = min(mixed_chunks, seqs)
        need["mixed steps"] = activation_bytes(cfg, rows_bucket(chunks * token_bucket(max_chunk) + seqs), seqs,
                                               dtype)
    if split_prefill:
        need["prefill graphs"] = prefill_graph_bytes(cfg, min(max_chunk, MAX_GRAPH_TOKENS), dtype)
    return need


SERVING_HELP = ("give fewer kv_blocks (unset, the pool reuses the engine's cache), a smaller max_num_batched_tokens "
                "(the mixed steps' and prefill graphs' rows) or max_num_seqs")


def check_memory(llm, need: dict[str, int], help: str = SERVING_HELP) -> None:
    """Refuse, before allocating, serving buffers that do not fit the GPU's free memory
    (`help`: what to change, for the buffers `need` names)."""
    if not llm.device.startswith("cuda"):
        return
    free, _ = torch.cuda.mem_get_info(torch.device(llm.device))
    total = sum(need.values())
    if total > free:
        parts = [f"{name} ({n / GIB:.2f} GiB)" for name, n in need.items()]
        listed = f"{', '.join(parts[:-1])} and {parts[-1]}" if len(parts) > 1 else parts[0]
        raise request_error(f"serve: {listed} need {total / GIB:.2f} GiB, but {llm.device} has {free / GIB:.2f} "
                            "GiB free", help=help)
