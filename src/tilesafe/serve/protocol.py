"""The OpenAI request bodies the server accepts, checked field by field.

`parse_completion(body)` and `parse_chat(body)` turn a decoded JSON body into a
`ParsedRequest` (the prompt as the engine takes it, `SamplingParams`, streaming options) or
raise `ApiError` — an HTTP status and an OpenAI-style error body that names the field:

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}

Fields the engine does not implement with a non-default value (`n > 1`, `best_of`, `echo`,
more than the chosen token's log-probability, and the sampling knobs `SamplingParams` refuses
unless neutral: OpenAI's `presence_penalty`, `frequency_penalty`, `logit_bias`, vLLM's
`min_p`, `repetition_penalty`, ... — `sampling_params.NOT_APPLIED`) are refused rather than
ignored; unknown fields are ignored, as vLLM does.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..engine.errors import RequestError
from ..errors import TileSafeError
from ..engine.sampling_params import NOT_APPLIED, SamplingParams, is_neutral


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, type: str = "invalid_request_error",
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(slots=True)
class ParsedRequest:
    model: str
    prompt: object                 # what LLM.generate takes: str or {"prompt_token_ids": [...]}
    params: SamplingParams
    stream: bool
    include_usage: bool
    logprobs: bool
    messages: list | None = None   # chat only
    enable_thinking: bool | None = None
    continuous_usage: bool = False  # stream_options.continuous_usage_stats (vLLM's): usage in every chunk


_MISSING = object()


def parse_completion(body) -> ParsedRequest:
    body = _object(body)
    prompt = _field(body, "prompt", required=True)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]              # a batch of one
    if isinstance(prompt, str):
        engine_prompt = prompt
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        engine_prompt = {"prompt_token_ids": list(prompt)}
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(400, "'prompt': a batch of several prompts is not supported; send one request per prompt",
                       "prompt")
    else:
        raise ApiError(400, "'prompt' must be a string or a non-empty list of token ids", "prompt")
    logprobs = _int(body, "logprobs", 0, 1, "0 or 1 (only the chosen token's log-probability)")
    if _field(body, "echo", False) not in (False, None):
        raise ApiError(400, "'echo' is not supported", "echo")
    _int(body, "best_of", 1, 1, "1")            # (checked: only 1 is taken)
    return _parsed(body, engine_prompt, max_tokens=_int(body, "max_tokens", 1, None, "a positive integer"),
                   logprobs=logprobs is not None)


def parse_chat(body) -> ParsedRequest:
    body = _object(body)
    messages = _field(body, "messages", required=True)
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ApiError(400, f"'messages[{i}]' must be an object with a string 'role' and a string 'content'",
                           "messages")
    want = _field(body, "logprobs", False)
    if not isinstance(want, bool) and want is not None:
        raise ApiError(400, f"'logprobs' must be a boolean, got {_json_type(want)}", "logprobs")
    _int(body, "top_logprobs", 0, 0, "0 (only the chosen token's log-probability is returned)")
    max_tokens = _int(body, "max_completion_tokens", 1, None, "a positive integer")
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, None, "a positive integer")
    kwargs = _field(body, "chat_template_kwargs", None)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs")
    thinking = (kwargs or {}).get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise ApiError(400, "'chat_template_kwargs.enable_thinking' must be a boolean", "chat_template_kwargs")
    parsed = _parsed(body, None, max_tokens=max_tokens, logprobs=bool(want))
    parsed.messages, parsed.enable_thinking = messages, thinking
    return parsed


def _parsed(body: dict, prompt, max_tokens, logprobs: bool) -> ParsedRequest:
    model = _field(body, "model", required=True)
    if not isinstance(model, str):
        raise ApiError(400, f"'model' must be a string, got {_json_type(model)}", "model")
    n = _int(body, "n", 1, None, "1")
    if n is not None and n != 1:
        raise ApiError(400, f"'n' must be 1 (one completion per request), got {n}", "n")
    stop = _field(body, "stop", None)
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise ApiError(400, "'stop' must be a non-empty string or a list of them", "stop")
    stream = _field(body, "stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise ApiError(400, f"'stream' must be a boolean, got {_json_type(stream)}", "stream")
    options = _field(body, "stream_options", None)
    if options is not None and (not isinstance(options, dict) or not all(
            isinstance(options.get(k, False), bool) for k in ("include_usage", "continuous_usage_stats"))):
        raise ApiError(400, "'stream_options' must be an object like {\"include_usage\": true}", "stream_options")
    # The knobs the sampler lacks go to SamplingParams, which refuses any but their neutral value
    # (they were dropped here: a request with presence_penalty=1.5 decoded as if it had none).
    knobs = {name: body[name] for name in NOT_APPLIED if name in body}
    try:
        params = SamplingParams(
            temperature=_number(body, "temperature", 0.0, None, ">= 0"),
            top_p=_number(body, "top_p", 0.0, 1.0, "in (0, 1]", open_low=True),
            top_k=_int(body, "top_k", -1, None, ">= -1 (0 or -1: no limit)"),
            max_tokens=max_tokens,
            seed=_int(body, "seed", None, None, "an integer"),
            stop=stop or [],
            ignore_eos=_bool(body, "ignore_eos"),
            logprobs=1 if logprobs else None,
            **knobs)
    except RequestError as e:
        refused = next((k for k, v in knobs.items() if not is_neutral(v, NOT_APPLIED[k][0])), None)
        raise ApiError(400, refusal(e), refused) from None
    options = options or {}
    return ParsedRequest(model, prompt, params, bool(stream), bool(options.get("include_usage")), logprobs,
                         continuous_usage=bool(options.get("include_usage") and options.get("continuous_usage_stats")))


def refusal(e: TileSafeError) -> str:
    """An engine refusal as an HTTP error's message: what is wrong, then what to do instead."""
    return f"{e.message} ({e.help})" if e.help else e.message


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {_json_type(body)}")
    return body


def _field(body: dict, name: str, default=_MISSING, required: bool = False):
    if name not in body:
        if required:
            raise ApiError(400, f"'{name}' is a required field", name)
        return default
    return body[name]


def _bool(body: dict, name: str) -> bool:
    v = _field(body, name, None)
    if v is not None and not isinstance(v, bool):
        raise ApiError(400, f"'{name}' must be a boolean, got {_shown(v)}", name)
    return bool(v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(body: dict, name: str, low, high, want: str):
    v = _field(body, name, None)
    if v is None:
        return None
    if not _is_int(v) or (low is not None and v < low) or (high is not None and v > high):
        raise ApiError(400, f"'{name}' must be {want}, got {_shown(v)}", name)
    return v


def _number(body: dict, name: str, low, high, want: str, open_low: bool = False):
    v = _field(body, name, None)
    if v is None:
        return None
    bad = not isinstance(v, (int, float)) or isinstance(v, bool) or v != v
    if not bad:
        bad = (low is not None and (v <= low if open_low else v < low)) or (high is not None and v > high)
    if bad:
        raise ApiError(400, f"'{name}' must be a number {want}, got {_shown(v)}", name)
    return float(v)


def _shown(v) -> str:
    return f"{_json_type(v)} {v!r}"[:80]


def _json_type(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "integer", float: "number"}.get(type(v), type(v).__name__)
