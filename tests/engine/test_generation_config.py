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
