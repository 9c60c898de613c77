"""`LLM.score`: teacher-forced logits, log-probabilities and greedy tokens at each position of
a continuation, against transformers' forward pass over the same tokens (float32, CPU), both
through one prefill and through the decode steps; bad requests are refused at the user's
line and leave the LLM working."""
import pytest
import torch

import tilesafe as ts
from tilesafe.engine import LLM, RequestError, SamplingParams

PROMPT = [3, 17, 5, 60, 2]
CONTINUATION = [8, 41, 41, 90, 0, 13]


@pytest.fixture(scope="module")
def model(checkpoint):
    folder, hf = checkpoint()
    return LLM(str(folder), device="cpu", max_model_len=16, max_num_seqs=2, progress=False), hf


def hf_rows(hf, prompt, continuation):
    """transformers' logits (T, V) of the rows predicting each continuation token."""
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + continuation[:-1]])).logits[0].float()
    return logits[len(prompt) - 1:]


def test_prefill_scores_match_transformers(model):
    llm, hf = model
    s = llm.score(PROMPT, CONTINUATION)
    want = hf_rows(hf, PROMPT, CONTINUATION)
    assert s.logits.shape == (len(CONTINUATION), 96) and s.logits.dtype == torch.float32
    assert s.logits.device.type == "cpu"
    torch.testing.assert_close(s.logits, want, atol=1e-4, rtol=1e-4)
    want_lp = torch.log_softmax(want.double(), -1)
    assert s.logprobs == pytest.approx([want_lp[i, t].item() for i, t in enumerate(CONTINUATION)], abs=1e-4)
    assert s.greedy == want.argmax(-1).tolist()
    assert s.greedy_logprobs == pytest.approx(want_lp.max(-1).values.tolist(), abs=1e-4)
    assert s.continuation == CONTINUATION


def test_decode_path_gives_transformers_greedy_tokens(model):
    """Each fed token goes through one decode step: the greedy tokens are the argmax of
    transformers' rows (weights at scale 0.5: no near-ties), also where the fed token is not
    the greedy one; the log-probabilities are those of the chosen tokens."""
    llm, hf = model
    s = llm.score(PROMPT, CONTINUATION, through="decode")
    want = hf_rows(hf, PROMPT, CONTINUATION)
    assert s.greedy == want.argmax(-1).tolist()
    assert s.greedy != CONTINUATION                       # teacher forcing: the fed tokens are not these
    assert s.greedy_logprobs == pytest.approx(torch.log_softmax(want.double(), -1).max(-1).values.tolist(), abs=1e-3)
    assert s.logits is None and s.logprobs is None


def test_decode_path_through_prefill_graphs(checkpoint, model):
    """With prefill graphs (padded bucket passes: the GPU's default) the decode path's prompt
    prefill runs through a bucket; the tokens are the same."""
    folder, _ = checkpoint()
    llm, _ = model
    bucketed = LLM(str(folder), device="cpu", max_model_len=16, max_num_seqs=2, prefill_graphs=True, progress=False)
    assert bucketed.prefill_graphs is not None
    assert bucketed.score(PROMPT, CONTINUATION, through="decode").greedy == \
        llm.score(PROMPT, CONTINUATION, through="decode").greedy


def test_greedy_generation_scores_as_its_own_tokens(model):
    """Scoring what greedy `generate` produced: every row's argmax is the generated token, and
    the log-probabilities are generate's."""
    llm, _ = model
    out = llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(temperature=0, max_tokens=5, logprobs=1))[0]
    got = out.outputs[0]
    for through in ("prefill", "decode"):
        s = llm.score(PROMPT, got.token_ids, through=through)
        assert s.greedy == got.token_ids
        assert s.greedy_logprobs == pytest.approx([next(iter(d.values())).logprob for d in got.logprobs], abs=1e-4)


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


BAD = [
    (([], [1]), "prompt_ids is empty"),
    (([1], []), "continuation_ids is empty"),
    (([1, 96], [2]), "prompt_ids holds token id 96, outside the vocabulary [0, 96)"),
    (([1], [2, -1]), "continuation_ids holds token id -1"),
    (([1] * 10, [2] * 7), "hold 17 tokens, but max_model_len is 16"),
    (("12", [2]), "prompt_ids must be a list of ints, got str"),
    (([1], [2], "eager"), "through must be 'prefill' or 'decode', got 'eager'"),
]


@pytest.mark.parametrize("args,fragment", BAD)
def test_bad_requests_are_refused_at_the_callers_line(model, args, fragment):
    llm, _ = model
    with pytest.raises(RequestError) as e:
        llm.score(*args)  # score: bad
    assert isinstance(e.value, ts.TileSafeError) and fragment in e.value.message, e.value.message
    assert e.value.loc is not None and e.value.loc.file == __file__ and e.value.loc.line == _line("score: bad")


def test_the_llm_still_works_after_refused_scores(model):
    llm, _ = model
    params = SamplingParams(temperature=0, max_tokens=3)
    before = llm.generate({"prompt_token_ids": PROMPT}, params)[0].outputs[0].token_ids
    for args, _ in BAD:
        with pytest.raises(RequestError):
            llm.score(*args)
    assert llm.generate({"prompt_token_ids": PROMPT}, params)[0].outputs[0].token_ids == before
    assert llm.score(PROMPT, before).greedy == before
