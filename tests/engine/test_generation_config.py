"""generation_config.json defaults against transformers' GenerationConfig reading the same file."""
import json
import sys

import pytest

from tilesafe.engine.generation_config import GenerationConfig
from tilesafe.engine.random_checkpoint import GENERATION_CONFIG
from tilesafe.engine.text_errors import ModelFileError

transformers = pytest.importorskip("transformers")


def write(folder, values) -> object:
    (folder / "generation_config.json").write_text(json.dumps(values))
    return folder


def test_qwen3_defaults_equal_transformers(tmp_path):
    folder = write(tmp_path, GENERATION_CONFIG)
    ours, ref = GenerationConfig.from_dir(folder), transformers.GenerationConfig.from_pretrained(folder)
    assert ours.eos_token_ids == tuple(ref.eos_token_id) == (151645, 151643)
    assert (ours.temperature, ours.top_k, ours.top_p, ours.do_sample) == (ref.temperature, ref.top_k, ref.top_p,
                                                                         ref.do_sample) == (0.6, 20, 0.95, True)
    assert (ours.bos_token_id, ours.pad_token_id) == (ref.bos_token_id, ref.pad_token_id) == (151643, 151643)
    assert ours.sampling_defaults() == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}


def test_one_eos_id_and_max_new_tokens(tmp_path):
    ours = GenerationConfig.from_dir(write(tmp_path, {"eos_token_id": 7, "max_new_tokens": 32, "temperature": 1}))
    assert ours.eos_token_ids == (7,)
    assert ours.sampling_defaults() == {"temperature": 1.0, "max_tokens": 32}
    assert isinstance(ours.temperature, float)


def test_a_folder_without_the_file_has_no_defaults(tmp_path):
    ours = GenerationConfig.from_dir(tmp_path)
    assert ours == GenerationConfig() and ours.eos_token_ids == () and ours.sampling_defaults() == {}


def test_a_file_saved_by_transformers_reads_back(tmp_path):
    transformers.GenerationConfig(eos_token_id=[3, 4], top_p=0.5, do_sample=True).save_pretrained(tmp_path)
    ours = GenerationConfig.from_dir(tmp_path)
    assert ours.eos_token_ids == (3, 4) and ours.sampling_defaults() == {"top_p": 0.5}


def lineno() -> int:
    return sys._getframe(1).f_lineno


@pytest.mark.parametrize("text, problem", [
    ("{oops", "is not valid JSON ("),
    ('{"temperature": "hot"}', "'temperature' is 'hot', not a number"),
    ('{"top_k": 2.5}', "'top_k' is 2.5, not an int"),
    ('{"eos_token_id": ["<|im_end|>"]}', "'eos_token_id' is ['<|im_end|>'], not a token id or a list of them"),
    # Out of SamplingParams' range: each was read, then refused at every generate as the request's own
    # "SamplingParams: temperature must be >= 0", a parameter the caller never set.
    ('{"temperature": -1}', "'temperature' is -1, not >= 0"),
    ('{"top_p": 0}', "'top_p' is 0, not in (0, 1]"),
    ('{"top_k": -2}', "'top_k' is -2, not >= -1"),
    ('{"max_new_tokens": 0}', "'max_new_tokens' is 0, not > 0"),
])
def test_a_malformed_file_is_named_with_its_field(tmp_path, text, problem):
    (tmp_path / "generation_config.json").write_text(text)
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        GenerationConfig.from_dir(tmp_path)
    assert info.value.message.startswith(f"{tmp_path / 'generation_config.json'}: {problem}")
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_an_llm_fills_unset_parameters_and_stops_at_the_files_eos(checkpoint, hf_greedy, tmp_path):
    """Through `LLM.generate`: a request that sets nothing takes the file's top_k=1 (greedy) and
    max_new_tokens, one that sets max_tokens keeps its own, and the file's EOS id stops the text.
    Tokens against transformers' greedy generate on the same weights."""
    import shutil

    from tilesafe.engine import LLM, SamplingParams
    folder, hf = checkpoint()
    prompt = [3, 17, 5]
    want = hf_greedy(hf, prompt, 6)[0]
    eos = next(t for t in want[2:] if t not in want[:2])       # a token first seen after two others
    dst = tmp_path / "ckpt"
    shutil.copytree(folder, dst)
    write(dst, {"top_k": 1, "temperature": 1.0, "max_new_tokens": 2})
    llm = LLM(str(dst), device="cpu", max_model_len=32, progress=False)
    unset = llm.generate({"prompt_token_ids": prompt}, SamplingParams())[0].outputs[0]
    assert unset.token_ids == want[:2] and unset.finish_reason == "length"
    own = llm.generate({"prompt_token_ids": prompt}, SamplingParams(max_tokens=6))[0].outputs[0]
    assert own.token_ids == want
    write(dst, {"eos_token_id": [eos], "top_k": 1})
    llm = LLM(str(dst), device="cpu", max_model_len=32, progress=False)
    out = llm.generate({"prompt_token_ids": prompt}, SamplingParams(max_tokens=6))[0].outputs[0]
    assert out.token_ids == want[:want.index(eos) + 1] and out.finish_reason == "stop"


def test_defaults_the_sampler_lacks_are_not_applied_and_named(tmp_path):
    """min_p and repetition_penalty were read, then dropped without a word: now kept out of the
    sampling defaults and listed by ignored_defaults (the LLM warns of them at load)."""
    ours = GenerationConfig.from_dir(write(tmp_path, {"temperature": 0.7, "min_p": 0.05, "repetition_penalty": 1.1}))
    assert ours.sampling_defaults() == {"temperature": 0.7}
    assert ours.ignored_defaults() == {"min_p": 0.05, "repetition_penalty": 1.1}
    neutral = GenerationConfig.from_dir(write(tmp_path, {"min_p": 0.0, "repetition_penalty": 1.0}))
    assert neutral.sampling_defaults() == {} and neutral.ignored_defaults() == {}


def test_an_llm_warns_once_at_load_of_a_default_it_cannot_apply(checkpoint, tmp_path, caplog):
    """One warning naming the file and both fields; generate then decodes with the file's other
    defaults (top_k=1: greedy) and no request-side error for the fields it never set."""
    import logging
    import shutil

    from tilesafe.engine import LLM, SamplingParams
    folder, _ = checkpoint()
    dst = tmp_path / "ckpt"
    shutil.copytree(folder, dst)
    write(dst, {"top_k": 1, "min_p": 0.05, "repetition_penalty": 1.1})
    with caplog.at_level(logging.WARNING, logger="tilesafe.engine"):
        llm = LLM(str(dst), device="cpu", max_model_len=16, progress=False)
        greedy = llm.generate({"prompt_token_ids": [3, 17]}, SamplingParams(temperature=0, max_tokens=3))
        unset = llm.generate({"prompt_token_ids": [3, 17]}, SamplingParams(max_tokens=3))
    warned = [r for r in caplog.records if r.name == "tilesafe.engine" and r.levelno == logging.WARNING]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    message = warned[0].getMessage()
    assert str(dst / "generation_config.json") in message and "min_p=0.05" in message
    assert "repetition_penalty=1.1" in message and "not applied" in message
    assert unset[0].outputs[0].token_ids == greedy[0].outputs[0].token_ids
    caplog.clear()
    write(dst, {"top_k": 1, "min_p": 0.0})
    with caplog.at_level(logging.WARNING, logger="tilesafe.engine"):
        LLM(str(dst), device="cpu", max_model_len=16, progress=False)
    assert not [r for r in caplog.records if r.name == "tilesafe.engine"]
