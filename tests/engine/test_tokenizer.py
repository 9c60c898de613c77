"""The engine's tokenizer against transformers' AutoTokenizer on Qwen3's real tokenizer files."""
import json
import sys

import pytest

from tilesafe.engine.qwen3_files import tokenizer_dir
from tilesafe.engine.text_errors import ModelFileError, TextInputError
from tilesafe.engine.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\r\nlines\n\n\n",
    "日本語のテキストと中文文本，还有한국어.",
    "emoji: 😀🦀🧬🫠 and a family 👩‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑∫√ and café vs cafe\u0301 (NFC)",
    "def f(x):\n    return {'a': [x ** 2 for _ in range(3)]}  # code\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHey<|endoftext|>",
    "<|im_start <|im_end| not special",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_equal_transformers(ours, reference, text):
    ids = ours.encode(text)
    assert ids == reference.encode(text)
    for skip in (True, False):
        assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_special_tokens_and_sizes_equal_transformers(ours, reference):
    assert (ours.eos_token, ours.eos_token_id) == ("<|im_end|>", reference.eos_token_id) == ("<|im_end|>", 151645)
    assert ours.pad_token_id == reference.pad_token_id == 151643
    assert ours.bos_token_id is None and reference.bos_token_id is None
    assert ours.vocab_size == len(ours) == len(reference) == 151669
    assert ours.special_tokens["<|im_start|>"] == reference.convert_tokens_to_ids("<|im_start|>") == 151644
    assert ours.encode("<|im_end|>") == [151645]                  # an added token is one id, as in transformers


def test_ids_past_the_tokenizer_decode_to_nothing(ours):
    """Qwen3's embedding has 151936 rows, the tokenizer 151669 ids: a random model can emit the rest."""
    assert ours.decode([9707, 151700, 151935]) == ours.decode([9707]) == "Hello"


def lineno() -> int:
    """The caller's line."""
    return sys._getframe(1).f_lineno


def _copy_tokenizer(tmp_path, skip=()):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if name not in skip:
            (tmp_path / name).write_bytes((tokenizer_dir() / name).read_bytes())
    return tmp_path


def test_a_missing_tokenizer_json_is_named(tmp_path):
    folder = _copy_tokenizer(tmp_path, skip=("tokenizer.json",))
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        Tokenizer.from_dir(folder)
    assert info.value.message == f"{folder / 'tokenizer.json'}: no such file (the tokenizer)"
    assert "copy tokenizer.json from the model's release" in info.value.help
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_a_missing_folder_is_named(tmp_path):
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        Tokenizer.from_dir(tmp_path / "nowhere")
    assert info.value.message == f"{tmp_path / 'nowhere'}: no such folder"
    assert info.value.loc.line == line


def test_a_broken_tokenizer_json_is_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"')
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        Tokenizer.from_dir(tmp_path)
    assert info.value.message.startswith(f"{tmp_path / 'tokenizer.json'}: is not a tokenizer the `tokenizers` "
                                         "library can read (")
    assert info.value.loc.line == line


@pytest.mark.parametrize("text, problem", [("{not json", "is not valid JSON ("), ('["a list"]', "holds a JSON list, "
                                                                                                "not an object")])
def test_a_broken_tokenizer_config_is_named(tmp_path, text, problem):
    folder = _copy_tokenizer(tmp_path, skip=("tokenizer_config.json",))
    (folder / "tokenizer_config.json").write_text(text)
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        Tokenizer.from_dir(folder)
    assert info.value.message.startswith(f"{folder / 'tokenizer_config.json'}: {problem}")
    assert info.value.loc.line == line


def test_without_tokenizer_config_there_are_no_special_roles(tmp_path):
    tok = Tokenizer.from_dir(_copy_tokenizer(tmp_path, skip=("tokenizer_config.json",)))
    assert tok.eos_token_id is None and tok.encode("Hi 世界") == [13048, 220, 99489]


def test_encode_refuses_what_is_not_text(ours):
    line = lineno() + 2
    with pytest.raises(TextInputError) as info:
        ours.encode([1, 2, 3])
    assert info.value.message == "encode() takes a str, not list"
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    assert json.dumps(ours.encode("ok")) == "[562]"      # still usable after the refusal
