"""The OpenAI / vLLM sampling knobs the sampler lacks (presence_penalty, logit_bias, min_p, ...)
reach SamplingParams from a request body: a non-neutral value is an HTTP 400 naming the field
(they were dropped, and the request decoded as if it had not asked for them); the neutral value
is taken, as vLLM clients often spell it out."""
import pytest

from tilesafe.engine.sampling_params import NOT_APPLIED
from tilesafe.serve.protocol import ApiError, parse_chat, parse_completion

COMPLETION = {"model": "m", "prompt": "w1"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "w1"}]}
REFUSED = [("presence_penalty", 0.5), ("frequency_penalty", -1), ("logit_bias", {"50256": -100}),
           ("min_p", 0.1), ("repetition_penalty", 1.2), ("min_tokens", 4), ("bad_words", ["x"]),
           ("allowed_token_ids", [1, 2]), ("include_stop_str_in_output", True), ("presence_penalty", "0.5")]


@pytest.mark.parametrize("parse, base", [(parse_completion, COMPLETION), (parse_chat, CHAT)])
@pytest.mark.parametrize("name, value", REFUSED)
def test_a_knob_the_sampler_lacks_is_a_400_naming_it(parse, base, name, value):
    with pytest.raises(ApiError) as e:
        parse({**base, name: value})
    assert (e.value.status, e.value.param) == (400, name)
    assert f"{name}={value!r} is not supported" in e.value.message
    assert e.value.message.endswith(f"({NOT_APPLIED[name][1]})")         # with what to do instead


def test_the_field_named_is_the_refused_one_beside_neutral_ones():
    with pytest.raises(ApiError) as e:
        parse_completion({**COMPLETION, "presence_penalty": 0, "logit_bias": {}, "min_p": 0.2})
    assert e.value.param == "min_p"


@pytest.mark.parametrize("parse, base", [(parse_completion, COMPLETION), (parse_chat, CHAT)])
def test_neutral_values_are_taken(parse, base):
    neutral = {"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "min_p": 0, "repetition_penalty": 1,
               "min_tokens": 0, "bad_words": [], "allowed_token_ids": None, "include_stop_str_in_output": False,
               "n": 1}
    p = parse({**base, **neutral, "temperature": 0.5}).params
    assert p.temperature == 0.5 and p.presence_penalty == 0 and p.logit_bias == {} and p.repetition_penalty == 1
