"""The OpenAI-compatible HTTP server (FastAPI): `/v1/models`, `/v1/completions`,
`/v1/chat/completions` (streaming over server-sent events, or one JSON response),
`/health` and `/metrics` (Prometheus text).

    app = build_app(AsyncLLM(llm, metrics=ServerMetrics(name)), name)
    uvicorn.run(app, host="127.0.0.1", port=8000)       # or `tilesafe serve MODEL`

A bad request never reaches the engine: the body is checked (`protocol.py`) and the prompt
tokenized and checked by the engine's rules first, and any refusal is an HTTP 400 (404 for
an unknown model) with an OpenAI-style error body naming the field. A streaming request's
checks all happen before the response starts, so its errors are HTTP errors too. A client
that disconnects mid-stream aborts its request, which frees its slot and KV blocks. At
shutdown the engine cancels what is still running.
"""
from __future__ import annotations

import contextlib
import json
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..engine.errors import RequestError
from ..errors import TileSafeError
from .async_llm import AsyncLLM
from .protocol import ApiError, ParsedRequest, parse_chat, parse_completion, refusal


def build_app(engine: AsyncLLM, model_name: str, metrics=None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        engine.shutdown()                     # graceful: requests still running end with 'abort'

    app = FastAPI(title="tilesafe", lifespan=lifespan)
    created = int(time.time())

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        return JSONResponse(ApiError(500, f"internal error: {exc}", type="internal_error").body(), 500)

    @app.get("/health")
    async def health():
        if not engine.thread.alive:
            return JSONResponse({"status": "stopped"}, 503)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "tilesafe", "max_model_len": engine.llm.max_model_len}]}

    @app.get("/metrics")
    async def prometheus():
        from prometheus_client import CONTENT_TYPE_LATEST
        return Response(metrics.render() if metrics else b"", media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _serve(engine, model_name, request, parse_completion, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await _serve(engine, model_name, request, parse_chat, chat=True)

    return app


async def _serve(engine: AsyncLLM, model_name: str, request: Request, parse, chat: bool):
    try:
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            raise ApiError(400, f"the request body is not valid JSON: {e}") from None
        p = parse(body)
        if p.model != model_name:
            raise ApiError(404, f"the model '{p.model}' does not exist (this server serves '{model_name}')", "model",
                           code="model_not_found")
        prompt = _chat_prompt(engine, p) if chat else p.prompt
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        outputs = engine.generate(prompt, p.params, request_id)
        try:
            first = await outputs.__anext__()      # the engine's checks run here: errors are still HTTP errors
        except RequestError as e:
            raise ApiError(400, refusal(e), "messages" if chat else "prompt") from None
    except ApiError as e:
        return JSONResponse(e.body(), e.status)
    shape = _Shape(engine, model_name, request_id, chat, p)
    if p.stream:
        return StreamingResponse(_sse(shape, first, outputs), media_type="text/event-stream")
    outs = [first]
    if not first.finished:
        async for out in outputs:
            outs.append(out)
    return JSONResponse(shape.whole(outs))


def _chat_prompt(engine: AsyncLLM, p: ParsedRequest):
    tok = engine.tokenizer
    if tok is None:
        raise ApiError(400, "this model has no tokenizer, so no chat template: use /v1/completions with token ids",
                       "messages")
    try:
        return {"prompt_token_ids": tok.apply_chat_template(p.messages, enable_thinking=p.enable_thinking)}
    except TileSafeError as e:
        raise ApiError(400, refusal(e), "messages") from None


async def _sse(shape: "_Shape", first, outputs):
    """Server-sent events: one chunk per engine output (the tokens of one step, or of several
    when the stream fell behind: AsyncLLM joins what is queued), a usage chunk if asked,
    [DONE]."""
    out = first
    try:
        while True:
            yield f"data: {shape.encode(out)}\n\n"
            if out.finished:
                break
            out = await outputs.__anext__()
        if shape.p.include_usage:
            yield f"data: {json.dumps(shape.usage_chunk())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        await outputs.aclose()                     # a disconnect lands here: the request is aborted


class _Shape:
    """The OpenAI JSON of one request's outputs, whole or as stream chunks."""

    def __init__(self, engine: AsyncLLM, model: str, request_id: str, chat: bool, p: ParsedRequest):
        self.engine, self.model, self.id, self.chat, self.p = engine, model, request_id, chat, p
        self.created = int(time.time())
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.first_chunk = True
        self._text_at = 0           # a completion stream's text so far: its chunks' text_offset go on from it
        self.chunk_kind = "chat.completion.chunk" if chat else "text_completion"     # a stream chunk's "object"
        # A stream chunk's fields that never change, as json.dumps writes them (without the closing brace).
        self._head = json.dumps({"id": request_id, "object": self.chunk_kind, "created": self.created,
                                 "model": model})[:-1]

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}

    def _count(self, out) -> None:
        self.prompt_tokens, self.completion_tokens = len(out.prompt_token_ids), out.num_generated

    def _logprobs(self, outs, offset: int = 0):
        if not self.p.logprobs:
            return None
        tok = self.engine.tokenizer
        pieces = [(tok.decode([t], skip_special_tokens=False) if tok else "", lp)
                  for o in outs for t, lp in zip(o.token_ids, o.logprobs or [])]
        if self.chat:
            return {"content": [{"token": s, "logprob": lp, "bytes": list(s.encode()), "top_logprobs": []}
                                for s, lp in pieces]}
        offsets, at = [], offset
        for s, _ in pieces:
            offsets.append(at)
            at += len(s)
        return {"tokens": [s for s, _ in pieces], "token_logprobs": [lp for _, lp in pieces],
                "top_logprobs": None, "text_offset": offsets}

    def whole(self, outs) -> dict:
        last = outs[-1]
        self._count(last)
        text = "".join(o.text for o in outs)
        choice = {"index": 0, "logprobs": self._logprobs(outs), "finish_reason": last.finish_reason,
                  "stop_reason": last.stop_reason}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
            kind = "chat.completion"
        else:
            choice["text"] = text
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice],
                "usage": self.usage()}

    def chunk(self, out) -> dict:
        self._count(out)
        logprobs = self._logprobs([out], self._text_at)
        if logprobs is not None and not self.chat:
            self._text_at += sum(map(len, logprobs["tokens"]))
        choice = {"index": 0, "logprobs": logprobs, "finish_reason": out.finish_reason}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": out.text} if self.first_chunk else {"content": out.text}
        else:
            choice["text"] = out.text
        self.first_chunk = False
        chunk = {"id": self.id, "object": self.chunk_kind, "created": self.created, "model": self.model,
                 "choices": [choice]}
        if self.p.continuous_usage:         # the tokens so far in every chunk: a client counts each chunk's
            chunk["usage"] = self.usage()
        return chunk

    def encode(self, out) -> str:
        """json.dumps(self.chunk(out)), without building and encoding the fixed fields again:
        the server writes one a token per stream, the largest share of its HTTP loop's time at
        many clients."""
        if self.p.logprobs:
            return json.dumps(self.chunk(out))
        self._count(out)
        text = json.dumps(out.text)
        if not self.chat:
            body = f'"text": {text}'
        elif self.first_chunk:
            body = f'"delta": {{"role": "assistant", "content": {text}}}'
        else:
            body = f'"delta": {{"content": {text}}}'
        self.first_chunk = False
        usage = f', "usage": {json.dumps(self.usage())}' if self.p.continuous_usage else ""
        return (f'{self._head}, "choices": [{{"index": 0, "logprobs": null, "finish_reason": '
                f'{json.dumps(out.finish_reason)}, {body}}}]{usage}}}')

    def usage_chunk(self) -> dict:
        return {"id": self.id, "object": self.chunk_kind, "created": self.created, "model": self.model, "choices": [],
                "usage": self.usage()}
