"""A model's chat template: the Jinja program that turns messages into the prompt text.

The template comes from the model folder: `chat_template.jinja` (how transformers 5 saves
it) or the `chat_template` entry of `tokenizer_config.json` (how the Hub's Qwen3 releases
ship it). It runs in Jinja's immutable sandbox, as transformers runs it: a template is code
from a download and may not reach Python objects or mutate the messages. The environment
matches what templates are written against (trim_blocks, lstrip_blocks, loop controls, a
`tojson` that keeps non-ASCII text, `raise_exception`, `strftime_now`), so the rendered text
and its ids equal `AutoTokenizer.apply_chat_template`'s.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .text_errors import file_error, input_error, read_json


class _Refused(Exception):
    """The template called raise_exception(message): the messages break its rules."""


@dataclass(frozen=True)
class ChatTemplate:
    source: str                     # the Jinja text
    origin: str                     # the file it came from, for errors
    special_tokens: Mapping[str, str]
    compiled: object                # a jinja2.Template

    @classmethod
    def from_text(cls, source: str, origin: str = "<chat template>", special_tokens: Mapping[str, str] = ()) \
            -> ChatTemplate:
        import jinja2
        try:
            compiled = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise file_error(origin, f"the chat template does not compile: {e.message} (template line {e.lineno})",
                             "fix the template, or restore the file from the model's release") from None
        return cls(source, origin, dict(special_tokens), compiled)

    @classmethod
    def from_dir(cls, folder: Path | None, config: Mapping | None = None,
                 special_tokens: Mapping[str, str] = ()) -> ChatTemplate:
        """The template of a model folder (`config` is its tokenizer_config.json, when read)."""
        if folder is not None and (folder / "chat_template.jinja").is_file():
            path = folder / "chat_template.jinja"
            return cls.from_text(path.read_text(encoding="utf-8"), str(path), special_tokens)
        path = Path(folder or ".") / "tokenizer_config.json"
        if config is None:
            config = read_json(path, "tokenizer settings")
        source = config.get("chat_template")
        if isinstance(source, list):       # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
            source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"),
                          None)
        if not isinstance(source, str):
            raise file_error(path, "has no chat template (no 'chat_template' entry, no chat_template.jinja beside it)",
                             "use a chat (instruct) model's folder, or encode a plain prompt with generate")
        return cls.from_text(source, str(path), special_tokens)

    def render(self, messages, *, add_generation_prompt: bool = True, enable_thinking: bool | None = None,
               tools=None, **extra) -> str:
        """The prompt text for `messages` ([{"role": ..., "content": ...}, ...]).
        `enable_thinking=None` leaves it undefined, the template's default (Qwen3: thinking on)."""
        import jinja2
        _check_messages(messages)
        values = dict(self.special_tokens, messages=[dict(m) for m in messages], tools=tools,
                      add_generation_prompt=add_generation_prompt, **extra)
        if enable_thinking is not None:
            values["enable_thinking"] = enable_thinking
        try:
            return self.compiled.render(**values)
        except _Refused as e:
            raise input_error(f"the chat template refused the messages: {e}",
                              f"see the template in {self.origin} for the conversation shapes it accepts") from None
        except jinja2.TemplateError as e:
            raise input_error(f"the chat template failed on these messages ({type(e).__name__}: {e})",
                              "each message needs a 'role' and a str 'content'; the template is in "
                              f"{self.origin}") from None


def render_chat(template, messages, *, add_generation_prompt: bool = True, enable_thinking: bool | None = None,
                tools=None, **extra) -> str:
    """Render `messages` with `template`: a ChatTemplate, or a model folder holding one."""
    if not isinstance(template, ChatTemplate):     # a folder: its template, without loading the vocabulary
        folder = Path(template)
        config = read_json(folder / "tokenizer_config.json", "tokenizer settings")
        special = {name: token_text(config.get(name)) for name in ("bos_token", "eos_token", "pad_token")}
        template = ChatTemplate.from_dir(folder, config, {k: v for k, v in special.items() if v is not None})
    return template.render(messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking,
                           tools=tools, **extra)


def token_text(entry) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or {"content": ...}."""
    if isinstance(entry, dict):
        return entry.get("content")
    return entry if isinstance(entry, str) else None


def _check_messages(messages) -> None:
    if isinstance(messages, (str, bytes, Mapping)) or not hasattr(messages, "__iter__"):
        raise input_error(f"chat messages must be a list of dicts, not {type(messages).__name__}",
                          'pass [{"role": "user", "content": "Hi"}]')
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise input_error(f"chat message {i} is {m!r}: it needs a str 'role'",
                              'each message is a dict such as {"role": "user", "content": "Hi"}')


def _environment():
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson escapes HTML characters for web pages; a prompt wants the text as is.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message):
    raise _Refused(message)


def _strftime_now(fmt: str) -> str:
    from datetime import datetime
    return datetime.now().strftime(fmt)
