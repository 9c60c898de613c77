"""`AsyncLLM`: the serving engine's asyncio API.

    engine = AsyncLLM(LLM(...), kv_blocks=None)
    async for out in engine.generate("Hello", SamplingParams(max_tokens=32), request_id="r1"):
        print(out.text, end="")          # StreamOutput: text / token_ids / logprobs deltas, finish_reason
    engine.abort("r1")                   # frees the request's slot and KV blocks before the next step
    engine.shutdown()

Every request is checked and tokenized by the offline engine's own rules (`RequestError`
before anything runs, raised from `generate` at its first iteration); the engine thread
(`EngineThread`) runs the batch. A request without stop strings is detokenized here, on
the event loop, not on the engine thread (whose host time between GPU steps is the step's
critical path); stop strings need the text where the stop is decided, so those requests
are detokenized by the engine. Closing the generator early — `aclose()`, leaving
`async with contextlib.aclosing(engine.generate(...))`, a cancelled task, a client that
disconnected — aborts the request. (A bare `break` closes it only when Python finalizes it:
at garbage collection or the end of the event loop, whose closing also aborts it.)

A consumer that falls behind the engine (a slow client, an event loop busy with many
streams) gets the outputs queued for it since its last read joined into one
(`merge_queued`): one chunk with several tokens, so its cost per engine step shrinks exactly
when it is the bottleneck; a consumer that keeps up gets one output per step.
"""
from __future__ import annotations

import asyncio
import itertools

from ..engine.errors import request_error
from ..engine.sampling_params import SamplingParams
from .engine_core import DEFAULT_DECODE_STEP_TOKENS, EngineCore
from .engine_thread import EngineThread
from .mailbox import mailbox_for
from .outputs import StreamOutput
from .request import Request


class AsyncLLM:
    def __init__(self, llm, kv_blocks: int | None = None, block_size: int = 16, metrics=None,
                 max_num_batched_tokens: int | None = None, prefix_caching: bool = True, warm_up=None,
                 stream_interval: int = 1, split_rows: int | None = None,
                 decode_step_tokens=DEFAULT_DECODE_STEP_TOKENS, launch_ahead: bool = True):
        self.llm = llm
        self.core = EngineCore(llm, kv_blocks, block_size, metrics, max_num_batched_tokens, prefix_caching,
                               warm_up=warm_up, stream_interval=stream_interval, split_rows=split_rows,
                               decode_step_tokens=decode_step_tokens, launch_ahead=launch_ahead)
        self.thread = EngineThread(self.core)
        self._ids = itertools.count()
        self._live: set[str] = set()

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    def check(self, prompt, params: SamplingParams | None):
        """The engine's Sequence for one prompt (str, {"prompt": str} or {"prompt_token_ids":
        [...]}), or its RequestError."""
        return self.llm._sequences(prompt, params)[0]

    async def generate(self, prompt, params: SamplingParams | None = None, request_id: str | None = None):
        """Yield `StreamOutput`s of one request until (and including) the finished one."""
        seq = self.check(prompt, params)
        detok = None
        if seq.detokenizer is not None and not seq.params.stop:
            # No stop string needs the text on the engine thread: this loop detokenizes, while
            # the engine thread waits on the GPU (text_of).
            detok, seq.detokenizer = seq.detokenizer, None
        request_id = request_id if request_id is not None else f"req-{next(self._ids)}"
        if request_id in self._live:
            raise request_error(f"AsyncLLM.generate: request id {request_id!r} is already in flight",
                                help="give each concurrent request its own id")
        if not self.thread.alive:
            raise request_error("AsyncLLM.generate: the engine is shut down",
                                help="shutdown() ends an AsyncLLM for good: make a new AsyncLLM(llm) to serve again")
        box = mailbox_for(asyncio.get_running_loop())
        outs: asyncio.Queue = asyncio.Queue()

        def sink(out) -> None:          # on the engine thread: one loop wake-up a step, not one per output
            box.post(outs, out)

        self._live.add(request_id)
        finished = False
        try:
            self.thread.add(Request(request_id, seq, sink))
            held = None                 # an exception queued behind merged outputs: raised next
            while not finished:
                if held is None:
                    out = await outs.get()
                else:
                    out, held = held, None
                if isinstance(out, BaseException):
                    finished = True
                    raise out
                assert isinstance(out, StreamOutput)
                held = merge_queued(out, outs)
                finished = out.finished
                if detok is not None:
                    out.text = text_of(detok, out)
                yield out
        finally:
            self._live.discard(request_id)
            if not finished:
                self.thread.abort(request_id)

    def abort(self, request_id: str) -> None:
        self.thread.abort(request_id)

    def stats(self) -> dict:
        """Running and waiting requests, KV blocks, prefix-cache hits and lookups (in blocks),
        preemptions and steps, read between steps; `step_timing`: per kind of step (decode,
        mixed, split, packed) [steps, wall seconds, rows]; `decode_gaps`: [count, seconds] of
        host time between a decode step's device sync and the next one's launch (none for a
        step launched ahead); `ahead_steps`: [adopted, dropped] decode steps launched ahead."""
        def read(core: EngineCore) -> dict:
            st = core.scheduler.blocks.stats()
            return dict(running=len(core.scheduler.running), waiting=len(core.scheduler.waiting),
                        kv_blocks_used=st.used, kv_blocks_total=st.total, prefix_cache_hits=st.hits,
                        prefix_cache_queries=st.queries, preemptions=core.preemptions,
                        steps=core.steps, step_timing={k: list(v) for k, v in core.timing.items()},
                        decode_gaps=list(core.decode_gaps), ahead_steps=list(core.ahead_steps))
        return self.thread.call(read)

    def shutdown(self) -> None:
        """Cancel the requests in flight (they end with finish_reason 'abort') and stop the thread."""
        self.thread.stop()


def merge_queued(out: StreamOutput, outs: asyncio.Queue):
    """Join into `out` the outputs of later steps already queued behind it (its consumer fell
    behind the engine: a slow client, a busy event loop): the text, tokens and
    log-probabilities joined, the finish the last one's. One chunk then carries several
    tokens instead of one chunk each, so the consumer's cost per step shrinks just when it is
    the bottleneck. Returns an exception found queued behind them (else None): it must be
    raised after `out` goes out."""
    while not out.finished and not outs.empty():
        nxt = outs.get_nowait()
        if isinstance(nxt, BaseException):
            return nxt
        out.text += nxt.text
        out.token_ids += nxt.token_ids
        if out.logprobs is not None and nxt.logprobs is not None:
            out.logprobs += nxt.logprobs
        out.num_generated, out.finished = nxt.num_generated, nxt.finished
        out.finish_reason, out.stop_reason = nxt.finish_reason, nxt.stop_reason
    return None


def text_of(detok, out: StreamOutput) -> str:
    """The text of an output's new tokens, as the engine's Sequence would have made it: each
    token's piece, then, when the request ends (not aborted), what the detokenizer held."""
    text = "".join([detok.add(t) for t in out.token_ids])
    if out.finished and out.finish_reason != "abort":
        text += detok.finish()
    return text
