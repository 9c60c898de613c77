"""Chat-template ids against transformers' apply_chat_template on Qwen3's real template."""
import sys

import pytest

from tilesafe.engine.chat_template import ChatTemplate, render_chat
from tilesafe.engine.qwen3_files import tokenizer_dir
from tilesafe.engine.text_errors import ModelFileError, TextInputError
from tilesafe.engine.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "Hi"}],
    "system": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    "multi-turn": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
                   {"role": "user", "content": "Another, in 日本語 😀"}],
    "thinking kept in history": [
        {"role": "system", "content": "Think first."}, {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "<think>\nLet me see.\n</think>\n\nBecause."},
        {"role": "user", "content": "And then?"}],
    "ends with the assistant": [{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello"}],
}


def reference_ids(reference, messages, **kwargs) -> list[int]:
    ids = reference.apply_chat_template(messages, tokenize=True, **kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


@pytest.mark.parametrize("name", CONVERSATIONS)
@pytest.mark.parametrize("thinking", [None, True, False])
def test_chat_ids_equal_transformers(ours, reference, name, thinking):
    messages = CONVERSATIONS[name]
    extra = {} if thinking is None else {"enable_thinking": thinking}
    for generation_prompt in (True, False):
        expected = reference_ids(reference, messages, add_generation_prompt=generation_prompt, **extra)
        assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt,
                                        enable_thinking=thinking) == expected


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, e.g. Zürich",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_tools_and_tool_calls_equal_transformers(ours, reference):
    messages = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in 東京?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                  "arguments": {"city": "東京"}}}]},
                {"role": "tool", "content": "晴れ, 21°C"}]
    expected = reference_ids(reference, messages, tools=TOOLS, add_generation_prompt=True)
    assert ours.apply_chat_template(messages, tools=TOOLS) == expected
    assert "Zürich" in ours.apply_chat_template(messages, tools=TOOLS, tokenize=False)   # tojson keeps non-ASCII


def test_enable_thinking_false_asks_for_an_empty_think_block(ours):
    text = render_chat(tokenizer_dir(), CONVERSATIONS["one user turn"], enable_thinking=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert ours.apply_chat_template(CONVERSATIONS["one user turn"], tokenize=False) == \
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def _folder_with(tmp_path, jinja=None, template="keep"):
    """Qwen3's tokenizer in a folder, with its template replaced or removed (None)."""
    import json
    (tmp_path / "tokenizer.json").write_bytes((tokenizer_dir() / "tokenizer.json").read_bytes())
    config = json.loads((tokenizer_dir() / "tokenizer_config.json").read_text())
    if template != "keep":
        config.pop("chat_template")
        if template is not None:
            config["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    return tmp_path


def test_chat_template_jinja_wins_as_in_transformers(tmp_path, reference):
    jinja = "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}{{ eos_token }}\n{% endfor %}" \
            "{% if add_generation_prompt %}[ASSISTANT]{% endif %}"
    folder = _folder_with(tmp_path, jinja=jinja)
    messages = CONVERSATIONS["multi-turn"]
    ref = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert Tokenizer.from_dir(folder).apply_chat_template(messages) == reference_ids(ref, messages,
                                                                                     add_generation_prompt=True)
    assert render_chat(folder, messages).startswith("[USER] Name a colour.<|im_end|>\n")


def test_tojson_keeps_text_as_transformers_does(tmp_path):
    template = ChatTemplate.from_text("{{ messages[0] | tojson }}")
    assert template.render([{"role": "user", "content": "<b>é</b>"}]) == '{"role": "user", "content": "<b>é</b>"}'


def lineno() -> int:
    return sys._getframe(1).f_lineno


def test_a_template_that_does_not_compile_is_named_with_its_line(tmp_path):
    folder = _folder_with(tmp_path, jinja="{% for m in messages %}\n{{ m.content }\n{% endfor %}")
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        Tokenizer.from_dir(folder).apply_chat_template(CONVERSATIONS["one user turn"])
    assert info.value.message.startswith(f"{folder / 'chat_template.jinja'}: the chat template does not compile: ")
    assert info.value.message.endswith("(template line 2)")
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_a_folder_without_a_template_says_so(tmp_path):
    folder = _folder_with(tmp_path, template=None)
    line = lineno() + 2
    with pytest.raises(ModelFileError) as info:
        Tokenizer.from_dir(folder).apply_chat_template(CONVERSATIONS["one user turn"])
    assert info.value.message == (f"{folder / 'tokenizer_config.json'}: has no chat template (no 'chat_template' "
                                  "entry, no chat_template.jinja beside it)")
    assert info.value.loc.line == line


def test_raise_exception_in_the_template_is_a_refusal(tmp_path):
    template = ChatTemplate.from_text("{% if messages[0].role != 'user' %}{{ raise_exception('users first') }}"
                                      "{% endif %}ok", "t.jinja")
    assert template.render([{"role": "user", "content": "x"}]) == "ok"
    line = lineno() + 2
    with pytest.raises(TextInputError) as info:
        template.render([{"role": "assistant", "content": "x"}])
    assert info.value.message == "the chat template refused the messages: users first"
    assert info.value.loc.line == line


def test_the_template_runs_sandboxed():
    """A template is code from a download: it may not mutate the messages or reach Python internals."""
    for source in ("{{ messages.append(1) }}", "{{ messages.__class__.__mro__ }}x{{ ''.__class__.__base__() }}"):
        with pytest.raises(TextInputError) as info:
            ChatTemplate.from_text(source).render([{"role": "user", "content": "x"}])
        assert info.value.message.startswith("the chat template failed on these messages (SecurityError: ") \
            or info.value.message.startswith("the chat template failed on these messages (UndefinedError: ")


@pytest.mark.parametrize("messages, problem", [
    ("Hi", "chat messages must be a list of dicts, not str"),
    ([{"content": "Hi"}], "chat message 0 is {'content': 'Hi'}: it needs a str 'role'"),
    ([{"role": "user", "content": "Hi"}, "Hi"], "chat message 1 is 'Hi': it needs a str 'role'"),
])
def test_malformed_messages_are_refused(ours, messages, problem):
    line = lineno() + 2
    with pytest.raises(TextInputError) as info:
        ours.apply_chat_template(messages)
    assert info.value.message == problem and info.value.loc.line == line
    assert ours.apply_chat_template(CONVERSATIONS["one user turn"])[:1] == [151644]   # still works


def test_a_message_without_content_names_the_template(ours):
    with pytest.raises(TextInputError) as info:
        ours.apply_chat_template([{"role": "user"}])
    assert info.value.message.startswith("the chat template failed on these messages (UndefinedError: ")
    assert str(tokenizer_dir() / "tokenizer_config.json") in info.value.help
