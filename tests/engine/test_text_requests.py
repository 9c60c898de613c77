"""Text prompts, streaming and stop strings through a small word-level tokenizer (token i is
the word `w<i>`), on a tiny random checkpoint."""
import shutil

import pytest

from tilesafe.engine import LLM, SamplingParams

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def llm(checkpoint, tmp_path_factory):
    folder, _ = checkpoint()
    dst = tmp_path_factory.mktemp("words") / "ckpt"
    shutil.copytree(folder, dst)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(96)}, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()          # words joined by spaces
    tok.save(str(dst / "tokenizer.json"))
    # A chat template of this toy vocabulary: w1 opens a turn, w2 names the assistant.
    (dst / "chat_template.jinja").write_text("{% for m in messages %}w1 {{ m['content'] }} {% endfor %}"
                                             "{% if add_generation_prompt %}w2 {% endif %}")
    return LLM(str(dst), device="cpu", max_model_len=32, progress=False)


def test_text_prompt_equals_its_ids(llm):
    params = SamplingParams(temperature=0, max_tokens=5)
    by_text = llm.generate("w3 w17 w5", params)[0]
    by_ids = llm.generate({"prompt_token_ids": [3, 17, 5]}, params)[0]
    assert by_text.prompt_token_ids == [3, 17, 5] and by_text.prompt == "w3 w17 w5"
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids
    want = " ".join(f"w{t}" for t in by_ids.outputs[0].token_ids)
    assert by_text.outputs[0].text.strip() == want


def test_stream_joins_to_the_final_text(llm):
    params = SamplingParams(temperature=0, max_tokens=6)
    final = llm.generate("w3 w17 w5", params)[0].outputs[0]
    deltas = list(llm.stream("w3 w17 w5", params))
    assert "".join(d.text for d in deltas) == final.text
    assert sum((d.token_ids for d in deltas), []) == final.token_ids
    assert deltas[-1].finished and deltas[-1].finish_reason == "length"


def test_stop_string_cuts_the_text_and_the_stream(llm):
    full = llm.generate("w3 w17 w5", SamplingParams(temperature=0, max_tokens=6))[0].outputs[0]
    stop = f"w{full.token_ids[2]}"
    params = SamplingParams(temperature=0, max_tokens=6, stop=[stop])
    out = llm.generate("w3 w17 w5", params)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == full.text[:full.text.find(stop)]
    assert stop not in out.text
    assert "".join(d.text for d in llm.stream("w3 w17 w5", params)) == out.text


def test_stream_takes_one_prompt_as_ids_too(llm):
    params = SamplingParams(temperature=0, max_tokens=4)
    by_ids = list(llm.stream([3, 17, 5], params))
    by_text = list(llm.stream("w3 w17 w5", params))
    assert sum((d.token_ids for d in by_ids), []) == sum((d.token_ids for d in by_text), [])


def test_chat_renders_the_template_with_a_generation_prompt(llm):
    params = SamplingParams(temperature=0, max_tokens=4)
    messages = [{"role": "user", "content": "w3 w17"}]
    out = llm.chat(messages, params)[0]
    assert out.prompt_token_ids == [1, 3, 17, 2]
    assert out.outputs[0].token_ids == llm.generate({"prompt_token_ids": [1, 3, 17, 2]}, params)[0].outputs[0].token_ids
    two = llm.chat([messages, [{"role": "user", "content": "w5"}]], params)
    assert [o.prompt_token_ids for o in two] == [[1, 3, 17, 2], [1, 5, 2]]
