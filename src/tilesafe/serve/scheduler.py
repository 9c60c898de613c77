"""The scheduler of continuous batching: waiting and running queues, admission by free KV
blocks, a token budget per step split between decodes and prefill chunks, preemption by
recomputation.

Every running request has `uncomputed` tokens whose KV the model must still compute: one
for a decoding request (the token it feeds back), more for a prompt being prefilled. A
step (`schedule()`) gives

1. each running request a slot for its newest token (the block manager's `append`),
   preempting the latest-arrived running requests while blocks are short;
2. every decoding request its one token;
3. the prefilling requests, in arrival order, chunks of what the step's budget
   (`max_num_batched_tokens`, decodes counted) has left: a long prompt is prefilled over
   several steps while the others keep decoding;
4. the budget's rest to waiting requests admitted in arrival order while a sequence
   fits (`max_num_seqs`) and the cache holds the request's tokens — less the leading
   blocks the prefix cache already has, whose KV is not computed again — plus one block of
   headroom per running sequence. The head of the queue is never overtaken.

With `max_fresh` set (the server's default warm-up: its captured mixed steps hold up to
that many fresh prompts), a step keeps to the shapes warm-up ran: it admits at most
`max_fresh` prompts, none beside a prompt's later chunk and none that the budget left would
cut (unless it is the step's only prefill: a prompt longer than the budget), and a prompt
with a prefix-cache hit is recomputed from position 0 as a fresh prompt (its cached blocks
are shared, not written again: the runner writes no KV before `req.cached`).

With `row_budget` set (EngineCore's `decode_step_tokens`), a step that carries decode rows —
or a prompt already partly computed — is planned as rows of the captured decode step: its
decode rows, then prompt chunks (a prompt's next n uncomputed tokens, n rows, fresh or not)
up to `row_budget` rows in all (a dict: a budget per bucket of the decode rows; an `ItlRows`:
the rows within the inter-token bound while they keep up with the queue, else no row step for
fresh prompts — row_policy.py), or up to the
decode bucket the decode rows fill anyway (`row_buckets`), never past the largest bucket (up to
`model_runner.ROW_STEP_SEQS` x max_num_seqs; max_num_seqs without buckets). The step then costs a decode
step of that many rows, so a prompt arriving beside running requests delays their next
token by at most the budget's step time; a longer prompt goes over several steps. A prefix
hit keeps its cached positions (the rows attend through the block table). Steps with
neither decode rows nor a prompt under way take whole fresh prompts as above.

The block manager owns the blocks: a request's block table and slot mapping come from it,
and `computed()` names the blocks whose KV the step wrote so later prompts can share them.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .block_manager import BlockManager
from .request import Request
from .row_policy import ItlRows

DEFAULT_BATCHED_TOKENS = 2048     # tokens one step computes, decodes and prefill chunks together (vLLM's)


@dataclass(slots=True)
class StepPlan:
    """What one step computes: one token for each of `decode`, and for each (request, n) of
    `prefill` its next n uncomputed tokens (the chunk that ends its prompt samples a token)."""
    decode: list[Request]
    prefill: list[tuple[Request, int]]
    preempted: list[Request]
    rows: bool = False          # every token a row of the decode step (row_budget), decode rows first

    @property
    def num_tokens(self) -> int:
        return len(self.decode) + sum(n for _, n in self.prefill)


class Scheduler:
    def __init__(self, max_num_seqs: int, max_model_len: int, num_blocks: int, block_size: int,
                 max_num_batched_tokens: int | None = None, prefix_caching: bool = True,
                 max_fresh: int | None = None, row_budget: int | dict[int, int] | None = None,
                 row_buckets: list[int] | None = None):
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching=prefix_caching)
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens or max(DEFAULT_BATCHED_TOKENS, max_num_seqs)
        self.max_fresh = max_fresh        # None: any admission; else the module docstring's limits
        # None: no decode-step rows; else the rows of a step beside decodes: one count, one per
        # bucket of the step's decode rows ({bucket: rows}), or an ItlRows policy
        self.row_budget = row_budget
        self.row_buckets = row_buckets    # the decode step's row buckets (None: any row count)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._by_id: dict[str, Request] = {}
        self._admitting = True

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._by_id

    def add(self, req: Request) -> None:
        self._by_id[req.request_id] = req
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, admit: bool = True) -> StepPlan:
        """The next step's plan (steps 1-4 of the module's docstring); the blocks of every
        request in it are allocated. Call `computed` for each once the step has run.
        `admit=False`: no waiting request joins (a decode step launched ahead has its rows)."""
        self._admitting = admit
        preempted = self._reserve()
        decode, prefilling = [], []                 # one uncomputed token (its fed-back one), more
        for r in self.running:
            n = r.uncomputed
            if n == 1:
                decode.append(r)
            elif n > 1:
                prefilling.append(r)
        prefilling.sort(key=lambda r: r.order)
        under_way = any(r.computed for r in prefilling)
        if self.row_budget is not None and (decode or under_way):
            # (ItlRows: rows only while they keep up, else whole fresh prompts as without rows)
            if under_way or not isinstance(self.row_budget, ItlRows) \
                    or self.row_budget.keeps_up(*self._itl_inputs(decode, prefilling)):
                return self._rows_plan(decode, prefilling, preempted)
        prefill = []
        budget = _take_chunks(prefilling, self.max_num_batched_tokens - len(decode), prefill)
        if self.max_fresh is not None and prefill:      # a later chunk: fresh prompts wait (another shape)
            return StepPlan(decode, prefill, preempted)
        for r in self._admit(budget):
            n = min(r.uncomputed, budget)
            if self.max_fresh is not None and r.uncomputed <= self.max_num_batched_tokens:
                n = r.uncomputed            # whole (the decode rows may pass the budget): no later chunk
            if r.uncomputed == 1:       # a one-token prompt, or all but its last token cached
                decode.append(r)
            else:
                prefill.append((r, n))
            budget -= n
        return StepPlan(decode, prefill, preempted)

    def _rows_plan(self, decode: list[Request], prefilling: list[Request], preempted: list[Request]) -> StepPlan:
        """A step of decode-step rows: the decode rows, then prompt chunks — those under way in
        arrival order, then admitted ones — up to the row budget or the decode rows' bucket."""
        d = len(decode)
        fill = self._fill(d)
        admit = True
        if isinstance(self.row_budget, ItlRows):    # by the inter-token bound
            limit = self.row_budget.limit(d, fill)
            # past keeping up, rows only finish the prompts under way: the next step falls back
            admit = self.row_budget.keeps_up(*self._itl_inputs(decode, prefilling))
        elif isinstance(self.row_budget, dict):
            limit = self.row_budget.get(fill, fill)
        else:
            limit = self.row_budget
        prefill = []
        most = self.row_buckets[-1] if self.row_buckets else self.max_num_seqs     # the largest step there is
        budget = _take_chunks(prefilling, min(max(limit, fill), most) - d, prefill)
        if admit:
            _take_chunks(self._admit(budget, recompute=False), budget, prefill)
        return StepPlan(decode, prefill, preempted, rows=True)

    def _itl_inputs(self, decode: list[Request], prefilling: list[Request]) -> tuple[int, int, int, int, float]:
        """What ItlRows.keeps_up decides from: the decode rows, the bucket they fill, the prompt
        tokens waiting or under way and their prompts, the decoding requests' mean max_tokens
        (their lifetime)."""
        d = len(decode)
        fill = self._fill(d)
        queued = sum(r.uncomputed for r in prefilling) + sum(r.uncomputed for r in self.waiting)
        return (d, fill, queued, len(prefilling) + len(self.waiting),
                sum(r.seq.params.max_tokens for r in decode) / d if d else 0.0)

    def _fill(self, decode_rows: int) -> int:
        """The row bucket `decode_rows` decodes fill (the count itself without buckets)."""
        return next((b for b in self.row_buckets if b >= decode_rows), decode_rows) if self.row_buckets \
            else decode_rows

    def computed(self, req: Request, n: int) -> None:
        """The step wrote the KV of `req`'s next n tokens: their full blocks become shareable."""
        req.computed += n
        self.blocks.computed(req.request_id, req.computed, n)

    def finish(self, req: Request) -> None:
        """A finished or cancelled request leaves; its blocks are free at once. Finishing it
        again is a no-op, even when a new request has taken its id since."""
        if self._by_id.get(req.request_id) is req:
            del self._by_id[req.request_id]
        if req in self.waiting:
            self.waiting.remove(req)
        if req.running:
            self._release(req)

    def get(self, request_id: str) -> Request | None:
        return self._by_id.get(request_id)

    # --- internals ------------------------------------------------------------------------
    def _reserve(self) -> list[Request]:
        """A slot for each running request's newest token (sampled last step), preempting the
        latest running requests while blocks are short; returns the preempted."""
        preempted = []
        blocks = self.blocks
        for req in sorted(self.running, key=lambda r: r.order):
            if not req.running:
                continue            # preempted by an earlier request of this loop
            seq = req.seq
            if seq.tokens and blocks.append_in_block(req.request_id, len(seq.prompt_ids) + len(seq.tokens) - 1,
                                                     seq.tokens[-1]):
                continue            # a decoding request whose newest token fits its last block (most steps)
            missing = _missing(req, self.blocks.num_tokens(req.request_id))
            while missing and not self.blocks.can_append(req.request_id, len(missing)):
                victim = max(self.running, key=lambda r: r.order)
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.running and missing:
                self.blocks.append(req.request_id, missing)
        return preempted

    def _admit(self, budget: int, recompute: bool = True) -> list[Request]:
        """Move the waiting requests that fit now, in order, to running; return them.
        `recompute=False`: steps of decode-step rows (any shape, a prefix hit kept)."""
        admitted = []
        limit = self.max_fresh if recompute else None
        while self._admitting and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if limit is not None and (len(admitted) >= limit or (admitted and req.uncomputed > budget)):
                break                       # it would need a shape warm-up did not run: next step
            tokens = req.kv_tokens
            if not self.blocks.can_allocate(tokens, reserve=len(self.running)):
                if self.running or not self.blocks.can_allocate(tokens):
                    break
                # Nothing runs: the head fits the empty cache (its length is below max_model_len).
            self.waiting.popleft()
            req.cached = req.computed = self.blocks.allocate(req.request_id, tokens)
            if limit is not None:
                req.computed = 0            # recomputed as a fresh prompt (its cached KV not rewritten)
            req.running = True
            self.running.append(req)
            admitted.append(req)
            budget -= min(req.uncomputed, budget)
        return admitted

    def _preempt(self, req: Request) -> None:
        self._release(req)
        req.preemptions += 1
        # Victims go latest first, so the earliest of them ends at the front.
        self.waiting.appendleft(req)

    def _release(self, req: Request) -> None:
        self.blocks.free(req.request_id)
        self.running.remove(req)
        req.running = False
        req.computed = 0


def _missing(req: Request, have: int) -> list[int]:
    """req.kv_tokens[have:] without joining the prompt and the output (a decoding request
    misses only its newest token)."""
    prompt, tokens = req.seq.prompt_ids, req.seq.tokens
    return tokens[have - len(prompt):] if have >= len(prompt) else prompt[have:] + tokens


def _take_chunks(requests: list[Request], budget: int, prefill: list) -> int:
    """Appends to `prefill` a chunk of each request in order, each at most the tokens `budget`
    has left (stopping when none are); returns what is left."""
    for r in requests:
        if budget <= 0:
            break
        n = min(r.uncomputed, budget)
        prefill.append((r, n))
        budget -= n
    return budget
