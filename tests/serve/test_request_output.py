"""Request.take_output: the tokens, log-probabilities and text new since the last output; a
request without a detokenizer on the engine thread (AsyncLLM detokenizes on its event loop)
skips the text work (a tenth of the engine thread's output time at 128 requests)."""
from tilesafe.engine import SamplingParams
from tilesafe.serve.request import Request


def test_outputs_carry_what_is_new_and_skip_text_without_a_detokenizer(llm, monkeypatch):
    from tilesafe.engine.sequence import Sequence
    calls = []
    real = Sequence.new_text
    monkeypatch.setattr(Sequence, "new_text", lambda self: calls.append(1) or real(self))
    seq = llm._sequences({"prompt_token_ids": [3, 4]}, SamplingParams(max_tokens=3, logprobs=0, ignore_eos=True))[0]
    with_text = llm._sequences({"prompt_token_ids": [3, 4]}, SamplingParams(max_tokens=3, ignore_eos=True))[0]
    seq.detokenizer = None
    r, t = Request("a", seq, sink=print), Request("b", with_text, sink=print)
    for tok in (5, 6):
        seq.append(tok, -0.5)
        with_text.append(tok, -0.5)
    out = r.take_output()
    assert (out.text, out.token_ids, out.logprobs, out.num_generated, out.finished) == ("", [5, 6], [-0.5, -0.5], 2,
                                                                                        False)
    assert calls == []                                   # no detokenizer: no text work
    seq.append(7, -1.0)
    out = r.take_output()
    assert (out.token_ids, out.logprobs, out.finished, out.finish_reason) == ([7], [-1.0], True, "length")
    assert t.take_output().text == with_text.text and with_text.text.split() == ["w5", "w6"]
    assert calls == [1]                                  # the detokenized request still asks for its text
