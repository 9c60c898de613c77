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

On a GPU the packed forward would run eagerly (tens of ms of host time at 4B). When every
prefill chunk of a step starts its prompt, the step is one captured forward instead
(`MixedSteps`, a graph per number of chunks and chunk bucket: chunks and decode rows
together, weights read once); where that form does not exist (R - C = 1) the step runs
split: the decode rows in their captured bucket and each chunk through the offline
engine's prefill graph of its token bucket (`engine.prefill_graphs`, writing through the
request's slot mapping). Other steps (a cached prefix, a prompt's later chunk) run the
packed forward, padded to bucketed shapes (`prefill_pack`): each compiles once, and the
full start-up warm-up (warm_up="full") compiles them all before the first request.

Decode: one token per decoding request, batched in the smallest bucket that holds them —
the offline engine's decode steps over the paged cache (`engine.decode_step.DecodeSteps`,
`run_paged`: pinned inputs with block tables updated incrementally, one host sync a step,
a captured graph per bucket and greedy/sampled, an all-greedy batch's tokens straight from
the LM head); sampler row i is the batch's row i, rewritten when the batch's requests
change, padding rows greedy.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..engine.decode_step import DecodeSteps
from ..engine.kv_cache import PagedKVCache
from ..engine.model import Activations, Qwen3Model
from ..engine.sampling_params import SamplingParams
from ..engine.prefill_graphs import MAX_GRAPH_TOKENS, PrefillGraphs
from ..engine.prefill_graphs import bucket_sizes as prefill_buckets
from ..engine.sampler import GREEDY_BELOW, Sampler
from .block_manager import BlockManager
from .memory_check import activation_bytes, check_memory, serving_bytes
from .mixed_steps import MixedSteps
from .prefill_pack import MIN_TOKENS, Packed, pack, pad_rows, table_width, token_bucket
from .request import Request

IDLE = SamplingParams(temperature=0).resolved({})
WARM_CHUNKS = 4       # prefill chunks in one step that warm-up (and a mixed step) covers: a burst of arrivals
# A step of decode-step rows may hold up to this many times max_num_seqs rows (its decodes plus
# prompt rows): the row buckets past max_num_seqs (2x, 3x) admit prompts faster while many wait.
ROW_STEP_SEQS = 3


class ModelRunner:
    def __init__(self, llm, blocks: BlockManager, max_tokens: int, pad_decode: bool = True,
                 pad_prefill: bool = True, split_prefill: bool | None = None, mixed_steps: bool | None = None):
        self.llm, self.blocks = llm, blocks
        self.pad_prefill = pad_prefill                       # prefill steps padded to bucketed shapes
        nb, bs = blocks.num_blocks, blocks.block_size
        cache = PagedKVCache.over(llm.model.cache, nb, bs)
        self.shares_llm_cache = cache is not None
        use_graph = llm.decode_steps.use_graph
        split_prefill = use_graph if split_prefill is None else split_prefill
        mixed_steps = use_graph if mixed_steps is None else mixed_steps
        max_chunk = min(max_tokens, llm.max_model_len)
        check_memory(llm, serving_bytes(llm, None if cache is not None else nb, bs, max_chunk, split_prefill,
                                        WARM_CHUNKS if mixed_steps else 0, pad_decode))
        if cache is None:
            with llm.on_device():
                cache = PagedKVCache.allocate(llm.config, nb, bs, llm.max_model_len, llm.dtype, llm.device)
        self.cache = cache
        # Its own sampler: rows 0.. for a decode bucket, the rows after them for the fresh
        # prompts of a split step (up to max_num_seqs of each); a row step's rows (ROW_STEP_SEQS).
        with llm.on_device():
            self.sampler = Sampler(max(2, ROW_STEP_SEQS) * llm.max_num_seqs, llm.device, llm.sampler.rng)
        self.model = Qwen3Model(llm.config, llm.model.w, cache, self.sampler)
        self.max_blocks = -(-llm.max_model_len // bs)
        self.table_width = table_width(self.max_blocks, bs, max_chunk)       # packed forwards
        self.decoder = DecodeSteps(self.model, llm.dtype, llm.device, use_graph,
                                   llm.decode_steps.pdl, paged=(self.max_blocks, llm.max_num_seqs), pad=pad_decode)
        self.split_prefill = split_prefill
        self.graphs = PrefillGraphs(self.model, llm.dtype, llm.device, min(max_chunk, MAX_GRAPH_TOKENS), use_graph) \
            if self.split_prefill else None
        self.max_chunk = max_chunk
        self.mixed = MixedSteps(self.model, llm.dtype, llm.device, llm.max_num_seqs, self.table_width, use_graph,
                                WARM_CHUNKS, max_chunk) if mixed_steps else None
        self._rows: tuple | None = None                      # the requests the sampler's rows hold, by row
        self.passes = 0                                      # forward passes run (one a step)
        self.last_form = ""                                  # the last prefill step's form: mixed, split, packed
        # Steps of fresh prompts run split (decode bucket + a prefill graph per prompt) rather than
        # mixed when they have no decode rows or at least this many (None: mixed wherever it fits).
        self.split_rows: int | None = None
        # With split_rows, a step of more fresh chunks than this runs split too: the mixed steps
        # the warm-up captured (EngineCore lowers it to 1-2 without a full warm-up).
        self.mixed_chunks = WARM_CHUNKS
        # A step of one fresh prompt and no decode rows runs its prefill graph (split) once the
        # graphs are warm (EngineCore): a mixed step's forward is the chunk plus max_num_seqs
        # sampled rows (H200, 4B, 128 tokens at 128 sequences: 7.2 ms against 5.1 ms).
        self.split_alone = False

    def step(self, prefill: list[tuple[Request, int]], decode: list[Request], while_running=None) -> list[Request]:
        """The step's one forward: the prefill chunks and the decode rows together (a decode
        row is its request's one uncomputed token), or the bucketed decode step alone.
        Returns the requests that got a token, each with it appended. `while_running` (the
        last step's outputs going out) is called once: after a mixed step's launch, before
        its wait (the host's work overlaps the device's); before the other forms."""
        before = while_running or (lambda: None)
        if not prefill:
            before()
            self.decode(decode)
            return list(decode)
        if all(not r.computed for r, _ in prefill):
            chunks = list(prefill) + [(r, 1) for r in decode if not r.computed]   # one-token prompts: chunks
            rows = [r for r in decode if r.computed]
            if self.split_alone and not rows and len(prefill) == 1 == len(chunks) \
                    and self.graphs.fits(prefill[0][1]):
                self.last_form = "split"
                before()
                return self.split(prefill, decode)
            if self.split_rows is not None and self.graphs is not None \
                    and all(self.graphs.fits(n) for _, n in prefill) \
                    and (not rows or len(rows) >= self.split_rows or self.mixed is None
                         or not self.mixed.fits(len(chunks)) or len(chunks) > self.mixed_chunks):
                self.last_form = "split"
                before()
                return self.split(prefill, decode)
            if self.mixed is not None and self.mixed.fits(len(chunks)):
                self.last_form = "mixed"
                return self.mixed_step(chunks, rows, while_running)
            if self.graphs is not None and all(self.graphs.fits(n) for _, n in prefill):
                self.last_form = "split"
                before()
                return self.split(prefill, decode)
        self.last_form = "packed"
        before()
        return self.prefill(list(prefill), list(decode))

    def mixed_step(self, chunks: list[tuple[Request, int]], decode: list[Request],
                   while_running=None) -> list[Request]:
        """Fresh prompts' chunks and the decode rows in one captured forward (MixedSteps);
        `while_running` is called between its launch and its wait."""
        reqs = [r for r, _ in chunks] + decode
        self._set_rows(reqs, pad_to=self.llm.max_num_seqs)
        tokens, logprobs = self.mixed.run(chunks, decode, self.blocks, while_running)
        self.passes += 1
        return _append_sampled(chunks, reqs, tokens, logprobs)

    def split(self, prefill: list[tuple[Request, int]], decode: list[Request]) -> list[Request]:
        """A step whose prefill chunks all start a prompt (nothing cached): the decode rows in
        their captured bucket, then each chunk through the prefill graph of its token bucket
        (PrefillGraphs, writing through the request's slot mapping). The weights are read
        once more per chunk, but every pass is a replay, where the packed forward runs
        eagerly (tens of ms of host time at 4B). Returns the requests that got a token."""
        b = self.decoder.bucket(len(decode)) if decode else 0
        self._set_rows(decode, pad_to=b, extra=[r for r, _ in prefill])
        done = []
        if decode:
            self._decode(decode)
            done += decode
        for j, (r, n) in enumerate(prefill):
            ids = (r.seq.prompt_ids + r.seq.tokens)[:n]
            slots = self.blocks.slots(r.request_id, 0, n)
            slots[:min(r.cached, n)] = [-1] * min(r.cached, n)   # a recomputed prefix hit: shared blocks kept
            token, logprob = self.graphs.run_rows(ids, slots, b + j)
            self.passes += 1
            if r.uncomputed == n:                  # the whole prompt: its next token
                r.seq.append(token, logprob)
                done.append(r)
        return done

    def prefill(self, chunks: list[tuple[Request, int]], decode: list[Request] = ()) -> list[Request]:
        """Compute the KV of each (request, n): its next n uncomputed tokens, and of each
        decoding request's newest token, in one forward padded to bucketed shapes
        (prefill_pack); return the requests whose prompt this ends and the decoding ones,
        each with its next token appended."""
        chunks = list(chunks) + [(r, 1) for r in decode if not r.computed]   # one-token prompts: chunks
        decode = [r for r in decode if r.computed]
        reqs = [r for r, _ in chunks] + decode
        p = pack(chunks, decode, self.blocks, self.llm.max_num_seqs, self.pad_prefill)
        r_rows = len(p.cached)
        self._set_rows(reqs, pad_to=r_rows)
        tokens, logprobs = self._forward(p)
        self.passes += 1
        return _append_sampled(chunks, reqs, tokens, logprobs)

    def _forward(self, p) -> tuple[list[int], list[float]]:
        """Run a packed forward; the sampled tokens and log-probabilities of its chunks."""
        llm = self.llm
        r_rows = len(p.cached)
        a = Activations.allocate(llm.config, p.rows, r_rows, llm.dtype, llm.device)
        host = np.zeros((3, p.rows), dtype=np.int32)
        host[0], host[1], host[2] = p.ids, p.positions, p.slots
        a.ids.copy_(torch.from_numpy(host[0]))
        a.positions.copy_(torch.from_numpy(host[1]))
        a.slots.copy_(torch.from_numpy(host[2]))
        a.last.copy_(torch.tensor(p.last, dtype=torch.int32))
        if p.rows > p.starts[-1]:                  # rows in no chunk: never attended, their attention zeros
            a.attn[p.starts[-1]:].zero_()
        table_t = None
        if any(p.cached):
            t = np.zeros((r_rows, self.table_width), dtype=np.int32)
            for i, row in enumerate(p.tables):
                t[i, :len(row)] = row
            table_t = torch.from_numpy(t).to(llm.device)
        self.model.prefill_paged(a, p.starts, p.cached, table_t)
        return a.tokens.tolist(), a.chosen.tolist()

    def warm_up_prefill(self, max_tokens: int, later_chunks_only: bool = False) -> None:
        """Run the packed forward of every shape a step of up to `max_tokens` tokens takes
        (prefill_pack): each chunk bucket fresh and after a cached prefix (Triton
        specializes an int start of 1, of a multiple of 16, and any other), one to
        WARM_CHUNKS chunks beside the decode rows (a step with more compiles its decode
        rows' attention once), each row bucket a step can reach. All rows are padding (no
        cache write) and the outputs are dropped, so that serving compiles nothing.
        `later_chunks_only`: only one chunk after a prefix beside the decode rows — the later
        chunks of a prompt longer than the step's budget, the one packed step the default
        warm-up's scheduling leaves (Scheduler.max_fresh)."""
        seqs = self.llm.max_num_seqs
        largest = token_bucket(min(max_tokens, self.llm.max_model_len))
        shapes = []                                 # (chunk rows, prefix before it, chunks, rows)
        t = MIN_TOKENS
        while t <= largest:
            shapes += [(t, start, 1, 0) for start in ((1, 16, 17) if later_chunks_only else (0, 1, 16, 17))]
            t *= 2
        if not later_chunks_only:
            shapes += self._other_prefill_shapes(max_tokens, seqs)
        done = set()
        for t, start, chunks, rows in shapes:
            p = Packed()
            for _ in range(chunks):
                p.add([0] * t, list(range(start, start + t)), [-1] * t, start, [], t - 1)
            pad_rows(p, seqs, rows)
            if (t, start, chunks, p.rows) in done:
                continue
            done.add((t, start, chunks, p.rows))
            self._set_rows([], pad_to=seqs)
            self._forward(p)
        self.forget_rows()

    def _other_prefill_shapes(self, max_tokens: int, seqs: int) -> list[tuple[int, int, int, int]]:
        shapes = [(MIN_TOKENS, 0, c, 0) for c in range(2, min(WARM_CHUNKS, seqs) + 1)]
        # Rows: chunks of n tokens take at most max(16, 2n - 1) rows, then the sequences' rows.
        most = 2 * min(max_tokens, seqs * self.llm.max_model_len) + MIN_TOKENS * WARM_CHUNKS + seqs
        return shapes + [(MIN_TOKENS, 0, 1, m) for m in prefill_buckets(most)]

    def decode(self, reqs: list[Request]) -> None:
        """One token for each request: each feeds back its newest token."""
        self.finish_decode(self.start_decode(reqs))

    def start_decode(self, reqs: list[Request], prefill: list[tuple[Request, int]] = ()):
        """Stage and launch the decode step of `reqs` without waiting for it; returns the
        ticket `finish_decode` takes (which waits and appends the tokens). Each (request, n)
        of `prefill` adds its next n uncomputed tokens as n more rows (Scheduler's row
        steps): row j at its position, written to its cache row, attending through the
        request's block table to every key before it — the KV of the rows before it in the
        same step included, since a layer writes every row's KV before its attention — so
        the rows compute what a prefill chunk would. Only the row that ends a prompt is
        sampled with the request's parameters (the others are idle greedy rows, dropped)."""
        ids, positions, rows, tables = self._decode_inputs(reqs)
        sampled = list(reqs)
        for r, n in prefill:
            c = r.computed
            slots = self.blocks.slots(r.request_id, c, c + n)
            kept = min(max(r.cached - c, 0), n)       # a prefix hit's positions: shared blocks, not rewritten
            slots[:kept] = [-1] * kept
            ids += r.kv_tokens[c:c + n]
            positions += range(c, c + n)
            rows += slots
            tables += [self.blocks.live_table(r.request_id)] * n
            sampled += [None] * (n - 1) + [r if r.uncomputed == n else None]
        self._set_rows(sampled, pad_to=self.decoder.bucket(len(sampled)))
        return reqs, prefill, self.decoder.start_paged(ids, positions, rows, tables)

    def finish_decode(self, ticket) -> list[Request]:
        """Wait for a started step; append each decode row's token and the token of each
        prompt the step ended; returns those requests (a row of None, a request gone since a
        launch ahead: its token dropped)."""
        reqs, prefill, started = ticket
        tokens, logprobs = self.decoder.finish(started)
        self.passes += 1
        for r, t, lp in zip(reqs, tokens, logprobs):
            if r is not None:
                r.seq.append(t, lp)
        done = [r for r in reqs if r is not None]
        i = len(reqs)
        for r, n in prefill:
            i += n
            if r.uncomputed == n:                     # its prompt's last row: the first token
                r.seq.append(tokens[i - 1], logprobs[i - 1])
                done.append(r)
        return done

    def launch_ahead(self, ticket):
        """The next decode step of a started decode step's requests (no prompt rows), launched
        before its tokens are read (DecodeSteps.launch_ahead): each request fed its coming
        token at its next position — a new block given now to one whose next token starts a
        block. None (nothing launched) when no block is free for one. `adopt` makes it a
        step's ticket, or `discard` drops it."""
        reqs, prefill, started = ticket
        bm = self.blocks
        bs = bm.block_size
        rows, tables = [], []
        for r in reqs:
            p = r.computed + 1                        # the position its coming token is fed at
            table = bm.live_table(r.request_id)
            if p >= len(table) * bs and not bm.grow(r.request_id):
                return None
            rows.append(table[p // bs] * bs + p % bs)
            tables.append(table)
        return list(reqs), self.decoder.launch_ahead(started, rows, tables)

    def adopt(self, ahead, decode: list[Request]):
        """The ticket of a step launched ahead, when its rows are `decode` (the scheduler's
        decode rows now) save requests gone since (their rows' tokens are dropped); else None."""
        reqs, started = ahead
        if not decode:
            return None
        live = {id(r) for r in decode}
        rows = [r if r is not None and id(r) in live else None for r in reqs]
        if [r for r in rows if r is not None] != decode:
            return None
        return rows, (), started

    def discard(self, ahead) -> None:
        """Wait for a step launched ahead and drop its tokens (its KV writes are those the
        step that replaces it writes again: the same tokens at the same positions)."""
        self.decoder.finish(ahead[1])

    def all_greedy(self, rows: int) -> bool:
        """Whether the sampler's first `rows` rows (a decode step's) take the argmax."""
        return self.sampler.all_greedy(self.decoder.bucket(rows))

    def _decode(self, reqs: list[Request]) -> None:
        """The decode step of `reqs` (their sampler rows set: rows 0.., then the bucket's)."""
        self.finish_decode((reqs, (), self.decoder.start_paged(*self._decode_inputs(reqs))))

    def row_buckets(self, rows: int | None = None) -> list[int]:
        """The buckets a step of decode-step rows runs in: the decode step's buckets, then k x
        max_num_seqs for k = 2 .. ROW_STEP_SEQS (prompt rows beside a full decode batch) up to
        the first that holds `rows` (None: all of them)."""
        seqs = self.llm.max_num_seqs
        sizes = list(self.decoder.sizes or [seqs])
        for k in range(2, ROW_STEP_SEQS + 1):
            if k * seqs > sizes[-1] and (rows is None or sizes[-1] < rows):
                sizes.append(k * seqs)
        return sizes

    def add_row_buckets(self, warm: bool, rows: int | None = None) -> list[int]:
        """Make the decode step's buckets past max_num_seqs that a step of `rows` rows can take
        (row_buckets; None: all) available — only row steps reach them — checking their memory
        first; `warm`: compile and capture them now (greedy and sampled), not inside a served
        step. Buckets made earlier stay. Returns the buckets."""
        dec, sizes = self.decoder, self.row_buckets(rows)
        if dec.sizes is not None and sizes != dec.sizes:
            cfg, width = self.llm.config, self.max_blocks
            check_memory(self.llm, {"decode-step row buckets": sum(
                activation_bytes(cfg, b, b, self.llm.dtype) + 4 * b * width for b in sizes if b not in dec.sizes)},
                help=f"a decode_step_tokens of at most max_num_seqs ({self.llm.max_num_seqs}) needs no row buckets; "
                     "or serve fewer max_num_seqs")
            dec.sizes = sizes
        if warm:
            self._set_rows([], pad_to=sizes[-1])
            dec.warm_up()
            self.forget_rows()
        return dec.sizes

    def time_decode_buckets(self, reps: int = 5) -> dict[int, float]:
        """Seconds per replay of each warmed decode bucket's greedy step (all rows padding: no
        cache write, outputs dropped): what a step of that many rows costs on this device,
        which sets EngineCore's decode_step_tokens="auto". Empty without captured steps."""
        dec = self.decoder
        if not dec.use_graph or not dec.sizes:
            return {}
        times = {}
        for b in dec.sizes:
            step = dec.steps.get(b)
            if step is None or step.graphs.get(True) is None:
                continue
            dec.run_padding(step, True)                 # once untimed: the timed replays start warm
            start = time.perf_counter()
            for _ in range(reps):
                dec.run_padding(step, True)
            times[b] = (time.perf_counter() - start) / reps
        return times

    def _decode_inputs(self, reqs: list[Request]):
        """Each request's fed-back token, its position, cache row and live block table."""
        bm = self.blocks
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
        return ids, positions, rows, tables

    def warm_up(self, max_tokens: int, full: bool = False) -> None:
        """Compile (and on a GPU capture), before the first request, every decode bucket
        (greedy and sampled) and the mixed steps of one and two fresh prompts of every chunk
        bucket up to `max_tokens`: what a server of fresh prompts runs. `full` adds the mixed
        steps of up to WARM_CHUNKS prompts, the prefill graphs of split steps and every
        packed prefill shape (cached prefixes, later chunks), so that nothing at all compiles
        later — at several times the start-up time. Without `full`, the packed steps of a
        prompt's later chunks (one chunk after a prefix, beside the decode rows) are run
        when a prompt can be longer than `max_tokens`: with the scheduler's max_fresh
        (EngineCore sets it) the default warm-up then covers every step. The rows are padding: the cache is not
        written."""
        self.decoder.warm_up()
        if self.mixed is not None:
            self._set_rows([], pad_to=self.llm.max_num_seqs)
            self.mixed.warm_up(token_bucket(min(max_tokens, self.max_chunk)), None if full else 2)
            self.forget_rows()
        if full and self.graphs is not None:
            self.graphs.warm_up()
        if self.pad_prefill and (full or (self.mixed is not None and self.llm.max_model_len > max_tokens)):
            self.warm_up_prefill(max_tokens, later_chunks_only=not full)

    def forget_rows(self) -> None:
        """Someone else wrote the sampler's rows (LLM.generate): set them again next step."""
        self._rows = None

    def _set_rows(self, reqs: list[Request], pad_to: int = 0, extra: list[Request] = ()) -> None:
        """Sampler row i: request i's parameters, seed and Philox step (tokens generated);
        then idle (greedy) rows up to pad_to, then the `extra` requests'. A greedy request's
        row is an idle row (its token is the argmax whatever its seed, top-k or top-p), so a
        greedy batch whose requests change — every row step, as prompt rows move — uploads
        nothing (the upload was a third of a row step's host time at 128 requests)."""
        pad = max(pad_to - len(reqs), 0)
        rows = list(reqs) + [None] * pad + list(extra)
        key = tuple(r if r is not None and not _greedy(r.seq.params) else None for r in rows)
        sampler = self.sampler
        if self._rows != key:
            sampler.set_rows([r.seq.params if r else IDLE for r in key], [r.seq.seed if r else 0 for r in key])
            self._rows = key
        if not sampler.all_greedy(len(rows)):     # greedy rows draw no random number: no upload
            sampler.set_steps([len(r.seq.tokens) if r else 0 for r in rows])


def _greedy(params: SamplingParams) -> bool:
    """Whether the sampler takes the argmax for these (resolved) parameters (Sampler's rule)."""
    return params.temperature < GREEDY_BELOW or params.top_k == 1


def _append_sampled(chunks: list[tuple[Request, int]], reqs: list[Request], tokens, logprobs) -> list[Request]:
    """After a forward over `chunks` then decode rows (`reqs`: the chunks' requests, then the
    decode rows', row i sampled tokens[i]): append its token to each request whose prompt
    the step ended (its last chunk) and to each decode row; return those requests."""
    done = []
    for i, r in enumerate(reqs):
        n = chunks[i][1] if i < len(chunks) else 1
        if r.uncomputed == n:                  # the prompt's last chunk (or a decode row): its next token
            r.seq.append(tokens[i], logprobs[i])
            done.append(r)
    return done
