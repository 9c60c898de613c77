"""`EngineCore`: continuous batching over the offline engine's model, one step at a time.

    core = EngineCore(llm, kv_blocks=None, block_size=16, metrics=None,
                      max_num_batched_tokens=None, prefix_caching=True, warm_up=None)
    core.add(request); core.abort(request_id)
    while core.has_work():
        core.step()                  # outputs go to each request's sink

A step asks the scheduler for its plan — a token for each decoding request, prefill chunks
of the prompts under way and of newly admitted requests, within the step's token budget,
preempting the latest requests when KV blocks run short — then runs the chunks and the
decodes in one forward pass (a pure decode step in its captured bucket), and emits every
new token: a step's outputs are sent while the next decode step runs on the GPU (or at
once when no work is left), so the engine thread's host work overlaps the device's. A long
prompt is thus prefilled over several steps while the running requests keep decoding;
a prompt whose leading blocks are in the prefix cache computes only the rest. Finished and
aborted requests free their blocks at once. `warm_up` (default True when the decode steps
are captured in graphs, on a GPU) compiles and captures, before the first request, every
decode bucket and the mixed steps of one and two fresh prompts of every chunk bucket;
`warm_up="full"` every step shape there is (ModelRunner.warm_up), so that serving compiles
and captures nothing. After the default warm-up the scheduler keeps to the warmed shapes
(`Scheduler.max_fresh`): at most two fresh prompts a step, a prefix hit recomputed as a
fresh prompt, and the later chunks of a prompt longer than the step's budget in the packed
shapes the warm-up also ran. `decode_step_tokens` (default None: off; "auto": for each
bucket of decode rows, the most rows whose step, timed after the warm-up, takes <= 2x that
bucket's step; "itl": the decode buckets' rows whose timed step keeps the decodes within the
inter-token bound while those rows keep up with the queue, else whole prompts as when off,
`row_policy.ItlRows`; or a row count, up to ROW_STEP_SEQS x max_num_seqs) makes every step that
carries decode rows one captured decode step of at most that many rows (or of the bucket its
decode rows fill): prompts join it as chunks of rows (Scheduler's row steps), so a new prompt
delays the running requests' next token by a bounded step, not by its whole prefill, and
while many prompts wait a step takes up to the row buckets past max_num_seqs (warmed when
the rows are turned on). `EngineCore` is not thread-safe: `EngineThread` owns it and
calls it from one thread (which then does all the device work).
"""
from __future__ import annotations

import time

import torch

from ..engine.errors import request_error
from .mailbox import one_wake_up
from .model_runner import ROW_STEP_SEQS, WARM_CHUNKS, ModelRunner
from .request import Request
from .row_policy import ItlRows
from .scheduler import Scheduler


# decode_step_tokens when none is given (EngineCore, AsyncLLM, serve_load's "default"; `tilesafe serve`'s
# --decode-step-tokens says "default itl" in its help and tests/serve/test_cli_serve.py pins it: change both).
# "itl" since session 21: on the H200 (4B) it kept the server within 5% of the offline engine at 1-128 clients
# and cut the p99 inter-token latency at 32 clients from 10.1 to 6.0 ms (docs/serving.md); off the GPU it is off.
DEFAULT_DECODE_STEP_TOKENS: int | str | None = "itl"


TRACE_STEPS = 100_000      # the most steps EngineCore.trace records


class EngineCore:
    def __init__(self, llm, kv_blocks: int | None = None, block_size: int = 16, metrics=None,
                 max_num_batched_tokens: int | None = None, prefix_caching: bool = True, pad_decode: bool = True,
                 warm_up: bool | str | None = None, split_prefill: bool | None = None,
                 mixed_steps: bool | None = None, stream_interval: int = 1, stream_interval_from: int = 64,
                 split_rows: int | None = None, decode_step_tokens: int | str | None = DEFAULT_DECODE_STEP_TOKENS,
                 launch_ahead: bool = True):
        self.llm = llm
        if getattr(llm, "_tp", None) is not None:
            raise request_error("serve: a tensor-parallel LLM cannot be served yet (the server runs one rank)",
                                help="serve an LLM made with tensor_parallel_size=1; a tensor-parallel LLM "
                                     "works with generate(), stream() and chat()")
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
            raise request_error(f"serve: block_size must be a positive int, got {block_size!r}",
                                help="the tokens one KV block holds, e.g. block_size=16 (the default)")
        need = -(-llm.max_model_len // block_size)          # one sequence of max_model_len must fit
        if kv_blocks is None:
            kv_blocks = llm.max_num_seqs * need
        if not isinstance(kv_blocks, int) or kv_blocks < need:
            raise request_error(f"serve: kv_blocks {kv_blocks!r} of {block_size} tokens hold fewer than "
                                f"max_model_len {llm.max_model_len} tokens", help=f"give at least {need} blocks")
        if max_num_batched_tokens is not None and (not isinstance(max_num_batched_tokens, int)
                                                   or max_num_batched_tokens < llm.max_num_seqs):
            raise request_error(f"serve: max_num_batched_tokens {max_num_batched_tokens!r} is below max_num_seqs "
                                f"{llm.max_num_seqs}", help="a step must hold one decode token per running request")
        if not isinstance(stream_interval, int) or isinstance(stream_interval, bool) or stream_interval < 1:
            raise request_error(f"serve: stream_interval must be a positive int, got {stream_interval!r}",
                                help="1 sends each request's tokens every step; N every N steps")
        if split_rows is not None and (not isinstance(split_rows, int) or isinstance(split_rows, bool)
                                       or split_rows < 1):
            raise request_error(f"serve: split_rows must be a positive int or None, got {split_rows!r}",
                                help="None runs fresh prompts mixed wherever a mixed step fits")
        _check_step_tokens(decode_step_tokens, llm.max_num_seqs)     # before anything is allocated
        self.scheduler = Scheduler(llm.max_num_seqs, llm.max_model_len, kv_blocks, block_size,
                                   max_num_batched_tokens, prefix_caching)
        self.runner = ModelRunner(llm, self.scheduler.blocks, self.scheduler.max_num_batched_tokens, pad_decode,
                                  split_prefill=split_prefill, mixed_steps=mixed_steps)
        split = split_rows is not None and self.runner.graphs is not None
        self.runner.split_rows = split_rows if split else None
        if warm_up not in (None, True, False, "full"):
            raise request_error(f"serve: warm_up must be True, False, 'full' or None, got {warm_up!r}",
                                help="leave it unset (None): the step shapes serving uses are warmed wherever "
                                     "decode graphs run; 'full' warms every step shape there is")
        start = time.perf_counter()
        use_graph = self.runner.decoder.use_graph
        warms = use_graph if warm_up is None else bool(warm_up)
        if warms:
            with llm.on_device(), torch.inference_mode():
                self.runner.warm_up(self.scheduler.max_num_batched_tokens, full=warm_up == "full")
                if self.runner.graphs is not None:
                    if warm_up != "full":                # the prefill graphs a split step replays
                        self.runner.graphs.warm_up()
                        self.runner.forget_rows()
                    self.runner.split_alone = True       # a lone fresh prompt: its prefill graph
            mixed = self.runner.mixed
            if warm_up != "full" and mixed is not None:
                # Steps keep to the shapes the default warm-up ran: its mixed steps of 1-2 fresh prompts
                # (with split_rows, split steps of up to WARM_CHUNKS: any count replays the prefill graphs).
                warmed = 2 if mixed.fits(2) else 1
                self.scheduler.max_fresh = WARM_CHUNKS if split else warmed
                self.runner.mixed_chunks = warmed      # more fresh prompts than that go split
        # Decode-step rows (Scheduler.row_budget), off unless asked for: "auto" gives each bucket
        # of decode rows the most rows whose measured step is at most twice that bucket's (issue
        # 19's inter-token bound, per bucket), "itl" the rows within that bound (row_policy.py);
        # without warmed captured steps to time (the CPU, no warm-up) both are off.
        self._warmed = bool(use_graph and warms)
        self.decode_step_times: dict[int, float] = {}
        self.auto_step_tokens: dict[int, int] | None = None     # "auto"'s budget per decode bucket
        self.scheduler.row_buckets = self.runner.decoder.sizes
        self.set_decode_step_tokens(decode_step_tokens)
        self.warm_up_s = time.perf_counter() - start
        # While at least stream_interval_from requests run, each sends its tokens every
        # stream_interval steps (staggered by arrival; the first and the last at once): the
        # receivers' loop then has 1/stream_interval of the outputs a step to write.
        self.stream_interval, self.stream_interval_from = stream_interval, stream_interval_from
        self.metrics = metrics
        self._order = 0
        self._pending: list[Request] = []       # the last step's requests whose outputs are not sent yet
        self._gone: list[Request] = []          # requests whose receiver went away inside this step
        self.steps = 0
        self.preemptions = 0
        # Decode steps launched ahead: while only decodes run, the next step of the same
        # requests is launched before this one's tokens are read (_can_launch_ahead), so the
        # host's work between two steps — scheduling, staging, the launch — overlaps the device's.
        self.launch_ahead = launch_ahead
        self._ahead = None                      # the step launched ahead, not yet adopted
        self.ahead_steps = [0, 0]               # steps launched ahead: [adopted, dropped]
        # Per kind of step ("decode", or the runner's prefill form: "mixed", "split", "packed"):
        # [steps, wall seconds, rows]; and for back-to-back decode steps [gaps, seconds] of host
        # time between one's device sync and the next one's launch (the device idles then).
        self.timing: dict[str, list] = {}
        self.decode_gaps = [0, 0.0]
        self._synced: float | None = None
        # A list to record each step in (serve_load's per-step view of the inter-token gaps):
        # (kind, rows, decode rows, perf_counter before its scheduling, after its outputs), up to TRACE_STEPS.
        self.trace: list[tuple] | None = None
        self._gauges()

    def set_decode_step_tokens(self, tokens: int | str | None) -> None:
        """The rows of a step beside decodes (None: off; "auto" and "itl": from the decode buckets'
        step times, measured on first use, off without warmed captured steps to time; call it on
        the engine thread, between steps)."""
        _check_step_tokens(tokens, self.llm.max_num_seqs)
        timed = tokens in ("auto", "itl")                   # budgets from the buckets' timed steps
        if tokens not in (None, "itl") and (tokens != "auto" or self._warmed):    # (an unwarmed "auto" is off)
            with self.llm.on_device(), torch.inference_mode():     # the buckets past max_num_seqs, warmed
                self.scheduler.row_buckets = self.runner.add_row_buckets(   # (those N rows can reach;
                    warm=self._warmed, rows=None if timed else tokens)      # "itl" keeps to the decode buckets)
        if timed and self._warmed and set(self.decode_step_times) != set(self.runner.decoder.sizes):
            with self.llm.on_device(), torch.inference_mode():     # (again once "auto" added row buckets)
                self.decode_step_times = self.runner.time_decode_buckets()
            self.auto_step_tokens = rows_within_each(self.decode_step_times, 2.0) or None
        if tokens == "auto":
            self.decode_step_tokens = self.auto_step_tokens
        elif tokens == "itl":
            self.decode_step_tokens = ItlRows.from_times(self.decode_step_times)
        else:
            self.decode_step_tokens = tokens
        self.scheduler.row_budget = self.decode_step_tokens

    def add(self, req: Request) -> None:
        if req.request_id in self.scheduler:
            raise request_error(f"request id {req.request_id!r} is already running",
                                help="give each request in flight its own id")
        self._order += 1
        req.order = self._order
        self.scheduler.add(req)
        if self.metrics:
            self.metrics.request_added(len(req.seq.prompt_ids))
        self._gauges()

    def abort(self, request_id: str, notify: bool = False) -> None:
        """Drop a request (a client gone, a cancel): its capacity is free after this call."""
        self._flush()                           # its held tokens go out before the abort
        req = self.scheduler.get(request_id)
        if req is not None:
            self.scheduler.finish(req)
            self._settle_ahead()
            if notify:
                if req.sent < len(req.seq.tokens):     # tokens a stream interval held back go out first
                    _send(req, req.take_output())
                _send(req, req.aborted_output())
            self._gauges()

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> None:
        s = self.scheduler
        began = time.perf_counter()
        ahead, self._ahead = self._ahead, None
        plan = s.schedule(admit=ahead is None)  # a step launched ahead has its rows: arrivals join the next
        self.preemptions += len(plan.preempted)
        ticket = None
        if ahead is not None:
            ticket = self.runner.adopt(ahead, plan.decode) if not plan.prefill else None
            if ticket is None:                  # its rows are not this plan's: run the plan instead
                self._drop_ahead(ahead)
            else:
                self.ahead_steps[0] += 1
        if plan.prefill:        # the gauges show the admitted requests' blocks before their first token goes out
            self._gauges()
        start = time.perf_counter()
        synced, self._synced = self._synced, None
        with self.llm.on_device(), torch.inference_mode():
            if plan.prefill and not plan.rows:  # one forward pass: the chunks and the decode rows together
                # (the last step's outputs go out while a mixed step runs on the GPU; before the other forms)
                done = self.runner.step(plan.prefill, plan.decode, while_running=lambda: self._flush(in_step=True))
                self._time(self.runner.last_form, start, plan.num_tokens)
            elif plan.decode or plan.prefill:   # the last step's outputs go out while this one runs on the GPU
                if ticket is None:
                    ticket = self.runner.start_decode(plan.decode, plan.prefill)
                    if synced is not None:
                        self.decode_gaps[0] += 1
                        self.decode_gaps[1] += time.perf_counter() - synced
                elif synced is not None:        # launched before the last step's sync: no gap
                    self.decode_gaps[0] += 1
                if self._can_launch_ahead(plan, ticket):
                    self._ahead = self.runner.launch_ahead(ticket)      # (None: no block free for it)
                self._flush(in_step=True)
                done = self.runner.finish_decode(ticket)
                self._synced = time.perf_counter()
                self._time("rows" if plan.prefill else "decode", start, plan.num_tokens)
            for r, n in plan.prefill:
                s.computed(r, n)
            for r in plan.decode:
                s.computed(r, 1)
            for r in self._gone:                # receivers gone during the step: aborted now, their
                s.finish(r)                     # new token never sent
            self._gone = []
            if plan.prefill or plan.decode:     # (a step without either keeps the last one's outputs held)
                self._hold(done)
            self._settle_ahead()
        if not s.has_work():
            self._flush()
        self.steps += 1
        self._gauges()
        if self.trace is not None and len(self.trace) < TRACE_STEPS:
            kind = ((self.runner.last_form if not plan.rows else "rows") if plan.prefill
                    else "decode" if plan.decode else "none")
            self.trace.append((kind, plan.num_tokens, len(plan.decode), began, time.perf_counter()))

    def _can_launch_ahead(self, plan, ticket) -> bool:
        """Whether the step after this decode step is sure to decode the same requests, so that
        it can be launched now: nothing else runs or waits, every row of this step is a request
        still running, none ends by its length with this step's token (one ending by a stop
        token or an abort drops its row), and the batch is greedy (a sampled row's Philox step
        is uploaded with a host sync)."""
        s = self.scheduler
        if not self.launch_ahead or plan.prefill or s.waiting or len(plan.decode) != len(s.running) \
                or len(ticket[0]) != len(plan.decode):
            return False
        most = s.max_model_len
        for r in plan.decode:
            seq = r.seq
            made = len(seq.tokens) + 1
            if made >= seq.params.max_tokens or len(seq.prompt_ids) + made >= most:
                return False
        return self.runner.all_greedy(len(plan.decode))

    @property
    def ahead_requests(self) -> list[Request]:
        """The running requests of the decode step launched ahead (each one's next position is
        being computed already), or none."""
        return [r for r in self._ahead[0] if r is not None and r.running] if self._ahead else []

    def _settle_ahead(self) -> None:
        """Drop a step launched ahead whose requests have all ended (nothing would adopt it)."""
        ahead = self._ahead
        if ahead is not None and not any(r is not None and r.running for r in ahead[0]):
            self._drop_ahead(ahead)

    def quiesce(self) -> None:
        """Wait for and drop a step launched ahead: before anything else uses the model's
        buffers (an `LLM.generate` on the engine thread, a failure); its requests decode anew."""
        if self._ahead is not None:
            self._drop_ahead(self._ahead)

    def _drop_ahead(self, ahead) -> None:
        """Wait for a step launched ahead and drop its tokens."""
        self._ahead = None
        self.ahead_steps[1] += 1
        self.runner.discard(ahead)

    def _time(self, kind: str, start: float, rows: int) -> None:
        t = self.timing.setdefault(kind, [0, 0.0, 0])
        t[0] += 1
        t[1] += time.perf_counter() - start
        t[2] += rows

    def reset_prefix_cache(self) -> None:
        """The model's buffers were used outside the server (an `LLM.generate` call on the
        engine thread between steps): forget the prefix cache and the sampler's rows.
        Nothing may be running."""
        if self.scheduler.running:
            raise request_error("serve: reset_prefix_cache while requests run", help="call it between requests")
        self.quiesce()
        self.scheduler.blocks.reset_prefix_cache()
        self.runner.forget_rows()

    def fail_all(self, error: BaseException) -> None:
        """An exception inside a step: every request gets it; the engine starts empty again."""
        s = self.scheduler
        try:
            self.quiesce()
        except Exception:                       # the device failed: nothing of it is adopted
            self._ahead = None
        try:
            self._flush()                       # the tokens made before it
        except Exception:
            self._pending = []
        for req in list(s.running) + list(s.waiting):
            s.finish(req)
            _send(req, error)
        self._gone = []                         # finished above: a later step must not abort a new request of their id
        self._gauges()

    def abort_all(self) -> None:
        s = self.scheduler
        for req in list(s.running) + list(s.waiting):
            self.abort(req.request_id, notify=True)

    def _hold(self, done: list[Request]) -> None:
        """A step's outputs wait for the next step's launch (they go out while it runs); a
        finished request leaves the scheduler now, so the next step does not run it."""
        s = self.scheduler
        k = self.stream_interval if len(s.running) >= self.stream_interval_from else 1
        keep = []
        for r in done:
            if r.request_id not in s:       # aborted during the step (its receiver was gone)
                continue
            if r.seq.finished:
                s.finish(r)
            elif k > 1 and r.sent and (self.steps + r.order) % k:
                continue                    # not its turn: its tokens wait in the sequence for the next output
            keep.append(r)
        self._pending = keep

    def _flush(self, in_step: bool = False) -> None:
        """Send the outputs held from the last step. A request whose receiver is gone is
        aborted — after the step when this runs inside one (the step may be using its
        blocks)."""
        pending, self._pending = self._pending, []
        if pending:
            gone = self._emit(pending)
            if in_step:
                self._gone += gone
            else:
                for r in gone:
                    self.scheduler.finish(r)

    def _emit(self, reqs: list[Request]) -> list[Request]:
        """Send each request's new output; returns those whose receiver is gone."""
        with one_wake_up():         # each receiving event loop is woken once for the step's outputs
            return self._emit_each(reqs)

    def _emit_each(self, reqs: list[Request]) -> list[Request]:
        now = time.monotonic()
        m, generated, gone = self.metrics, 0, []
        itl: dict[float, int] = {}                    # one ITL a token (its share of the gap): {seconds: tokens}
        for r in reqs:
            new = len(r.seq.tokens) - r.sent
            if m and new:
                if r.first_token_at is None:
                    m.first_token(now - r.arrival)
                else:
                    share = (now - r.last_token_at) / new
                    itl[share] = itl.get(share, 0) + new
                generated += new
            r.first_token_at = r.first_token_at or now
            r.last_token_at = now
            out = r.take_output()
            if not _send(r, out):                     # a receiver that is gone aborts its request
                gone.append(r)
        if generated:
            m.generated(generated)                    # one counter update a step
        if itl:
            m.inter_tokens(itl)
        return gone

    def _gauges(self) -> None:
        if self.metrics:
            st = self.scheduler.blocks.stats()
            self.metrics.state(len(self.scheduler.running), len(self.scheduler.waiting), st.used, st.total, st.hits,
                               st.queries)


def _check_step_tokens(tokens, max_num_seqs: int) -> None:
    """decode_step_tokens is "auto", "itl", None or a row count a row step holds (up to
    ROW_STEP_SEQS x max_num_seqs)."""
    most = ROW_STEP_SEQS * max_num_seqs
    if tokens not in ("auto", "itl") and tokens is not None and (
            not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= most):
        raise request_error(f"serve: decode_step_tokens must be 'auto', 'itl', None or an int in "
                            f"1..{ROW_STEP_SEQS} x max_num_seqs ({most}), got {tokens!r}",
                            help="it counts the rows of one decode step (decode rows + prompt tokens); "
                                 "None takes fresh prompts whole beside the decodes")


def rows_within_each(times: dict[int, float], factor: float) -> dict[int, int]:
    """For each bucket b, the largest bucket whose step takes at most `factor` times b's step:
    a row budget per bucket of a step's decode rows (Scheduler.row_budget as a dict)."""
    return {b: max(c for c, u in times.items() if u <= factor * t) for b, t in times.items()}


def _send(req: Request, out) -> bool:
    """Hand an output to the request's receiver; False when the receiver is gone (its event
    loop closed): the engine must keep serving the others."""
    try:
        req.sink(out)
        return True
    except Exception:
        return False
