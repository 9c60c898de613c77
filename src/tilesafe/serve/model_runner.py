"""Runs the engine's Qwen3 model for the scheduler over a paged KV cache: one forward pass
a step — a ragged pass over the step's prefill chunks and its decode rows together, or,
when it only decodes, one batched decode step — every token's KV written to and read from
the blocks the block manager gave its request.

The cache is a pool of `num_blocks` blocks of `block_size` positions per layer
(`PagedKVCache`). When the offline engine's slot cache holds that many blocks it is reused
as the pool (no second allocation: the LLM then belongs to the server, and a `generate`
call in between must be followed by `EngineCore.reset_prefix_cache()`); otherwise the pool
is allocated. The model is the LLM's weights and sampler over that pool.

Prefill: chunk i of the step is a request's next n uncomputed tokens, positions
`computed ..`; every chunk is packed into one forward whose rows write their KV at the
slots of the request's block table, and whose attention reads the request's earlier
positions (cached prefix blocks, earlier chunks) through the table. The chunk that ends
a prompt samples its next token with the request's sampling row. The step's decode rows
join that pass as one-token chunks after it (a decoding request's next token is its one
uncomputed token), so the weights are read once a step, not twice; their attention is one
`paged_decode_attention` over them.

Decode: one token per decoding request, batched in the smallest bucket that holds them —
the offline engine's decode steps over the paged cache (`engine.decode_step.DecodeSteps`,
`run_paged`: pinned inputs with block tables updated incrementally, one host sync a step,
a captured graph per bucket and greedy/sampled, an all-greedy batch's tokens straight from
the LM head); sampler row i is the batch's row i, rewritten when the batch's requests
change, padding rows greedy.
"""
from __future__ import annotations

import itertools

import torch

from ..engine.decode_step import DecodeSteps
from ..engine.errors import request_error
from ..engine.kv_cache import PagedKVCache, cache_bytes
from ..engine.model import Activations, Qwen3Model
from ..engine.sampling_params import SamplingParams
from .block_manager import BlockManager
from .request import Request

IDLE = SamplingParams(temperature=0).resolved({})


class ModelRunner:
    def __init__(self, llm, blocks: BlockManager, pad_decode: bool = True):
        self.llm, self.blocks = llm, blocks
        nb, bs = blocks.num_blocks, blocks.block_size
        cache = PagedKVCache.over(llm.model.cache, nb, bs)
        self.shares_llm_cache = cache is not None
        if cache is None:
            _check_memory(llm, nb, bs)
            with llm._on_device():
                cache = PagedKVCache.allocate(llm.config, nb, bs, llm.max_model_len, llm.dtype, llm.device)
        self.cache = cache
        self.model = Qwen3Model(llm.config, llm.model.w, cache, llm.sampler)
        self.max_blocks = -(-llm.max_model_len // bs)
        self.decoder = DecodeSteps(self.model, llm.dtype, llm.device, llm.decode_steps.use_graph,
                                   llm.decode_steps.pdl, paged=(self.max_blocks, llm.max_num_seqs), pad=pad_decode)
        self._rows: tuple | None = None                      # the requests the sampler's rows hold, by row
        self.passes = 0                                      # forward passes run (one a step)

    def step(self, prefill: list[tuple[Request, int]], decode: list[Request]) -> list[Request]:
        """The step's one forward: the prefill chunks and the decode rows together (a decode
        row is its request's one uncomputed token), or the bucketed decode step alone.
        Returns the requests that got a token, each with it appended."""
        if not prefill:
            self.decode(decode)
            return list(decode)
        return self.prefill(list(prefill) + [(r, 1) for r in decode])

    def prefill(self, chunks: list[tuple[Request, int]]) -> list[Request]:
        """Compute the KV of each (request, n): its next n uncomputed tokens; return the
        requests whose prompt this ends, each with its next token appended."""
        llm, bm = self.llm, self.blocks
        reqs = [r for r, _ in chunks]
        lengths = [n for _, n in chunks]
        starts = [0, *itertools.accumulate(lengths)]
        ids, positions, slots, tables = [], [], [], []
        for r, n in chunks:
            c = r.computed
            ids += r.kv_tokens[c:c + n]
            positions += range(c, c + n)
            slots += bm.slots(r.request_id, c, c + n)
            table = bm.block_table(r.request_id)
            tables.append(table + [0] * (self.max_blocks - len(table)))
        self._set_rows(reqs)
        a = Activations.allocate(llm.config, starts[-1], len(chunks), llm.dtype, llm.device)
        a.ids.copy_(torch.tensor(ids, dtype=torch.int32))
        a.positions.copy_(torch.tensor(positions, dtype=torch.int32))
        a.slots.copy_(torch.tensor(slots, dtype=torch.int32))
        a.last.copy_(torch.tensor(starts[1:], dtype=torch.int32) - 1)
        cached = [r.computed for r in reqs]
        table_t = torch.tensor(tables, dtype=torch.int32, device=llm.device) if any(cached) else None
        self.model.prefill_paged(a, starts, cached, table_t)
        self.passes += 1
        done = []
        for (r, n), t, lp in zip(chunks, a.tokens.tolist(), a.chosen.tolist()):
            if r.uncomputed == n:                  # the prompt's last chunk: its logits give the next token
                r.seq.append(t, lp)
                done.append(r)
        return done

    def decode(self, reqs: list[Request]) -> None:
        """One token for each request: each feeds back its newest token."""
        bm = self.blocks
        b = self.decoder.bucket(len(reqs))
        self._set_rows(reqs, pad_to=b)
        bs = bm.block_size
        ids, positions, rows, tables = [], [], [], []
        for r in reqs:
            p = r.computed                         # the fed-back token's position
            table = bm.live_table(r.request_id)
            toks = r.seq.tokens                    # it feeds back its newest token (the prompt's last: none yet)
            ids.append(toks[-1] if toks else r.seq.prompt_ids[-1])
            positions.append(p)
            rows.append(table[p // bs] * bs + p % bs)
            tables.append(table)
        tokens, logprobs = self.decoder.run_paged(ids, positions, rows, tables)
        self.passes += 1
        for r, t, lp in zip(reqs, tokens, logprobs):
            r.seq.append(t, lp)

    def warm_up(self) -> None:
        """Compile (and on a GPU capture) every decode bucket, greedy and sampled, before
        the first request: their rows are padding, so the cache is not written."""
        self.decoder.warm_up()

    def forget_rows(self) -> None:
        """Someone else wrote the sampler's rows (LLM.generate): set them again next step."""
        self._rows = None

    def _set_rows(self, reqs: list[Request], pad_to: int = 0) -> None:
        """Sampler row i: request i's parameters, seed and Philox step (tokens generated)."""
        pad = max(pad_to - len(reqs), 0)
        key = (tuple(reqs), pad)
        sampler = self.llm.sampler
        if self._rows != key:
            sampler.set_rows([r.seq.params for r in reqs] + [IDLE] * pad, [r.seq.seed for r in reqs] + [0] * pad)
            self._rows = key
        if not sampler.all_greedy(len(reqs) + pad):     # greedy rows draw no random number: no upload
            sampler.set_steps([len(r.seq.tokens) for r in reqs] + [0] * pad)


def _check_memory(llm, num_blocks: int, block_size: int) -> None:
    """Refuse, before allocating, a pool that does not fit the GPU's free memory."""
    if not llm.device.startswith("cuda"):
        return
    size = torch.empty((), dtype=llm.dtype).element_size()
    need = cache_bytes(llm.config, num_blocks, block_size, size)   # num_blocks "slots" of block_size rows
    free, _ = torch.cuda.mem_get_info(torch.device(llm.device))
    if need > free:
        gib = 2 ** 30
        raise request_error(f"serve: {num_blocks} KV blocks of {block_size} tokens need {need / gib:.2f} GiB, but "
                            f"{llm.device} has {free / gib:.2f} GiB free",
                            help="give fewer kv_blocks, or leave kv_blocks unset: the default reuses the engine's "
                                 "cache")
