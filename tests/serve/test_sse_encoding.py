"""The server's stream chunks are written from a prefix encoded once per request
(`_Shape.encode`): each must be exactly json.dumps of the chunk the server built before —
completions and chat (the first delta has the role), any text (quotes, newlines, non-ASCII),
every finish reason, with and without continuous usage; with logprobs the whole chunk."""
import copy
import json

import pytest

pytest.importorskip("fastapi")

from tilesafe.engine import SamplingParams  # noqa: E402
from tilesafe.serve.api_server import _Shape  # noqa: E402
from tilesafe.serve.outputs import StreamOutput  # noqa: E402
from tilesafe.serve.protocol import ParsedRequest  # noqa: E402


class Tok:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{i}>" for i in ids)


class Engine:
    tokenizer = Tok()


TEXTS = ["plain", ' "quoted" \\ back', "new\nline\ttab", "caf\u00e9 \u2603 \U0001f600", ""]


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("logprobs", [False, True])
def test_each_chunk_is_json_dumps_of_the_chunk(chat, continuous, logprobs):
    p = ParsedRequest("m", {"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=9), True, True, logprobs,
                      continuous_usage=continuous)
    shape = _Shape(Engine(), "qwen3-4b-random", "cmpl-0123abc", chat, p)
    for i, (text, reason) in enumerate(zip(TEXTS, [None, None, None, None, "length"])):
        out = StreamOutput("r", text, [10 + i], [-0.5] if logprobs else None, [1, 2, 3], i + 1, reason is not None,
                           reason)
        want = json.dumps(copy.copy(shape).chunk(out))
        got = shape.encode(out)
        assert got == want
        assert json.loads(got)["choices"][0]["finish_reason"] == reason
    assert shape.completion_tokens == 5 and shape.prompt_tokens == 3
