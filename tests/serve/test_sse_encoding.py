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


def test_text_offsets_of_a_completion_stream_go_on_across_chunks():
    # Old code started every chunk's text_offset at 0 (a chunk joining several tokens then overlapped the next).
    p = ParsedRequest("m", {"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=9), True, False, True)
    shape = _Shape(Engine(), "m", "cmpl-1", False, p)
    chunks = [StreamOutput("r", "<10><11>", [10, 11], [-0.5, -0.25], [1, 2, 3], 2),
              StreamOutput("r", "<7>", [7], [-1.0], [1, 2, 3], 3, True, "length")]
    got = [json.loads(shape.encode(o))["choices"][0]["logprobs"] for o in chunks]
    assert [g["text_offset"] for g in got] == [[0, 4], [8]]
    assert [g["tokens"] for g in got] == [["<10>", "<11>"], ["<7>"]]
    whole = _Shape(Engine(), "m", "cmpl-1", False, p).whole(chunks)["choices"][0]["logprobs"]
    assert whole["text_offset"] == [0, 4, 8]          # the same offsets as the request's whole answer
