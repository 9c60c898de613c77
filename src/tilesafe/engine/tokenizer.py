"""The tokenizer of a Hugging Face model folder, through the `tokenizers` library.

`Tokenizer.from_dir(folder)` reads `tokenizer.json` (the fast tokenizer: normalizer,
pre-tokenizer, BPE model, added tokens, decoder) and `tokenizer_config.json` (which added
tokens are the EOS, BOS and padding tokens, and the chat template). Encoding adds no special
tokens of its own: Qwen3's post-processor adds none, and a chat prompt carries its own
`<|im_start|>` markers, which is what transformers' `AutoTokenizer` gives for the same files.
"""
from __future__ import annotations

from pathlib import Path

from .chat_template import ChatTemplate, token_text
from .text_errors import input_error, file_error, read_json


class Tokenizer:
    """Text to token ids and back: `encode(str) -> list[int]`, `decode(ids) -> str`."""

    def __init__(self, backend, config: dict, folder: Path | None = None):
        self._backend = backend             # a tokenizers.Tokenizer
        self.config = config                # tokenizer_config.json ({} when the folder has none)
        self.folder = folder
        self._template: ChatTemplate | None = None
        self.eos_token = token_text(config.get("eos_token"))
        self.bos_token = token_text(config.get("bos_token"))
        self.pad_token = token_text(config.get("pad_token"))
        self.eos_token_id = self.token_to_id(self.eos_token)
        self.bos_token_id = self.token_to_id(self.bos_token)
        self.pad_token_id = self.token_to_id(self.pad_token)

    @classmethod
    def from_dir(cls, folder: str | Path) -> Tokenizer:
        """The tokenizer of a model folder; a ModelFileError names a missing or broken file."""
        from tokenizers import Tokenizer as Backend
        folder = Path(folder)
        if not folder.is_dir():
            raise file_error(folder, "no such folder", "pass the folder of a Hugging Face model (config.json, "
                                                       "tokenizer.json, ...)")
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise file_error(path, "no such file (the tokenizer)",
                             "the engine needs a fast tokenizer: copy tokenizer.json from the model's release")
        config_path = folder / "tokenizer_config.json"   # first: it is small, the vocabulary is not
        config = read_json(config_path, "tokenizer settings") if config_path.is_file() else {}
        try:
            backend = Backend.from_file(str(path))
        except Exception as e:   # the Rust library raises plain Exceptions with serde's message
            raise file_error(path, f"is not a tokenizer the `tokenizers` library can read ({e})",
                             "restore tokenizer.json from the model's release") from None
        return cls(backend, config, folder)

    @property
    def vocab_size(self) -> int:
        """Ids this tokenizer can produce, added tokens included (151669 for Qwen3; the model's
        embedding may have more rows: Qwen3's has 151936, the extra ids decode to nothing)."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise input_error(f"encode() takes a str, not {type(text).__name__}",
                             "pass the text; token ids go straight to generate as {'prompt_token_ids': ids}")
        return self._backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of `ids`; special tokens (`<|im_end|>`, ...) are dropped unless asked for.
        Ids past the tokenizer's vocabulary (the model's padding rows) decode to nothing."""
        return self._backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str | None) -> int | None:
        return None if token is None else self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(int(token_id))

    @property
    def special_tokens(self) -> dict[str, int]:
        """The added tokens marked special, by text (`<|im_start|>`, `<|im_end|>`, ...)."""
        return {t.content: i for i, t in self._backend.get_added_tokens_decoder().items() if t.special}

    @property
    def chat_template(self) -> ChatTemplate:
        if self._template is None:
            self._template = ChatTemplate.from_dir(self.folder, self.config, self.special_token_texts())
        return self._template

    def special_token_texts(self) -> dict[str, str]:
        """What templates may refer to: bos_token, eos_token, pad_token (as transformers passes them)."""
        return {name: text for name, text in (("bos_token", self.bos_token), ("eos_token", self.eos_token),
                                              ("pad_token", self.pad_token)) if text is not None}

    def apply_chat_template(self, messages, *, add_generation_prompt: bool = True, enable_thinking: bool | None = None,
                            tools=None, tokenize: bool = True, **extra) -> list[int] | str:
        """The prompt ids of a conversation rendered by the model's chat template (or its text
        with tokenize=False). `enable_thinking=False` asks Qwen3 for an empty think block."""
        text = self.chat_template.render(messages, add_generation_prompt=add_generation_prompt,
                                         enable_thinking=enable_thinking, tools=tools, **extra)
        return self.encode(text) if tokenize else text

