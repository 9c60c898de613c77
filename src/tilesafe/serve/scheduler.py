"""The continuous-batching scheduler: which requests run in the next step.

Requests wait in arrival order (FIFO) and are admitted while a cache slot is free and the KV
capacity — counted in blocks by a `BlockManager` — holds their tokens, leaving one block of
headroom per running sequence so that admitting never forces the running ones out at once.
The head of the queue is never overtaken: a long prompt that does not fit yet holds back the
shorter ones behind it (fairness over packing).

Before a decode step every running sequence needs the slot of the token it feeds back. When
the blocks run out, the latest-arrived running sequence is preempted: its blocks and slot
are freed and it goes back to the front of the queue with its generated tokens, to be
recomputed by a prefill when it is admitted again (preemption by recomputation; no swap).
The capacity is checked to hold at least one sequence of `max_model_len` tokens, so the
earliest request always progresses.

The engine's model still stores each sequence in a per-sequence slot of `max_model_len`
positions; the blocks bound how many tokens the running sequences may hold together, which
is the rule a paged cache will enforce physically (the block tables are then what the paged
kernels read).
"""
from __future__ import annotations

from collections import deque

from .block_manager import BlockManager
from .request import Request


class Scheduler:
    def __init__(self, max_num_seqs: int, max_model_len: int, num_blocks: int, block_size: int):
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching=False)
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._free_slots = list(range(max_num_seqs))
        self._by_id: dict[str, Request] = {}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._by_id

    def add(self, req: Request) -> None:
        self._by_id[req.request_id] = req
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def admit(self) -> list[Request]:
        """Move the waiting requests that fit now, in order, into slots; return them."""
        admitted = []
        while self.waiting and self._free_slots:
            req = self.waiting[0]
            tokens = req.kv_tokens
            if self.blocks.blocks_needed(len(tokens)) + len(self.running) > self.blocks.num_free_blocks:
                if self.running:
                    break
                # Nothing runs: the head fits the empty cache (its length is below max_model_len).
            self.waiting.popleft()
            self.blocks.allocate(req.request_id, tokens)
            req.slot = min(self._free_slots)
            self._free_slots.remove(req.slot)
            self.running.append(req)
            admitted.append(req)
        return admitted

    def reserve_decode(self, reqs: list[Request]) -> list[Request]:
        """Give each of `reqs` the slot of the token it feeds back, preempting the latest
        running sequences while blocks are short; return the preempted ones."""
        preempted = []
        for req in sorted(reqs, key=lambda r: r.order):
            while req.slot is not None and not self.blocks.can_append(req.request_id, 1):
                victim = max(self.running, key=lambda r: r.order)
                self._preempt(victim)
                preempted.append(victim)
            if req.slot is not None:
                self.blocks.append(req.request_id, req.seq.tokens[-1:])
        return preempted

    def finish(self, req: Request) -> None:
        """A finished or cancelled request leaves; its blocks and slot are free at once."""
        self._by_id.pop(req.request_id, None)
        if req in self.waiting:
            self.waiting.remove(req)
        if req.slot is not None:
            self._release(req)

    def get(self, request_id: str) -> Request | None:
        return self._by_id.get(request_id)

    def _preempt(self, req: Request) -> None:
        self._release(req)
        req.preemptions += 1
        # Victims go latest first, so the earliest of them ends at the front.
        self.waiting.appendleft(req)

    def _release(self, req: Request) -> None:
        self.blocks.free(req.request_id)
        self.running.remove(req)
        self._free_slots.append(req.slot)
        req.slot = None
