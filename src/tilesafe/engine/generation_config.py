"""A checkpoint's generation defaults: `generation_config.json`.

Qwen3's release ships `{"eos_token_id": [151645, 151643], "temperature": 0.6, "top_k": 20,
"top_p": 0.95, ...}`. As in vLLM, these fill the sampling parameters a request leaves unset,
and every EOS id listed stops generation. A folder without the file has no defaults (greedy
unless a request asks otherwise; EOS from the tokenizer). A default the sampler does not
implement (a `min_p` or `repetition_penalty` other than neutral) is not applied: the LLM
logs one warning naming it when it loads (`ignored_defaults`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from .sampling_params import NOT_APPLIED, RANGES, is_neutral
from .text_errors import file_error, read_json

# The sampling fields vLLM takes from generation_config.json (max_new_tokens as max_tokens).
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_new_tokens")


@dataclass(frozen=True, slots=True)
class GenerationConfig:
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_new_tokens: int | None = None

    @classmethod
    def from_dir(cls, folder: str | Path) -> GenerationConfig:
        """The defaults of a model folder; all unset when it has no generation_config.json."""
        path = Path(folder) / "generation_config.json"
        if not path.is_file():
            return cls()
        return cls.from_dict(read_json(path, "generation defaults"), path)

    @classmethod
    def from_dict(cls, raw: dict, path: Path | str = "generation_config.json") -> GenerationConfig:
        values = {"eos_token_ids": _eos_ids(raw.get("eos_token_id"), path)}
        for f in fields(cls):
            if f.name != "eos_token_ids" and raw.get(f.name) is not None:
                values[f.name] = _checked(f.name, raw[f.name], path)
        return cls(**values)

    def sampling_defaults(self) -> dict:
        """The sampling values the file sets that the sampler applies, by SamplingParams' names
        (max_new_tokens -> max_tokens). As in vLLM, `do_sample` is not read: a file that sets a
        temperature samples with it."""
        out = {name: getattr(self, name) for name in SAMPLING_FIELDS
               if getattr(self, name) is not None and name not in NOT_APPLIED}
        if "max_new_tokens" in out:
            out["max_tokens"] = out.pop("max_new_tokens")
        return out

    def ignored_defaults(self) -> dict:
        """The file's sampling values the sampler does not implement and that are not neutral
        (min_p 0.05, repetition_penalty 1.1): not applied; the LLM warns of them at load."""
        return {name: getattr(self, name) for name in SAMPLING_FIELDS
                if name in NOT_APPLIED and not is_neutral(getattr(self, name), NOT_APPLIED[name][0])}


_KINDS = {"bos_token_id": int, "pad_token_id": int, "do_sample": bool, "temperature": float, "top_k": int,
          "top_p": float, "min_p": float, "repetition_penalty": float, "max_new_tokens": int}


# SamplingParams' ranges (max_new_tokens is its max_tokens): a file value outside them is the
# file's error at load, not a refused request (naming SamplingParams, which the caller never set)
# at every generate.
_RANGES = {**{name: RANGES[name] for name in ("temperature", "top_p", "top_k")}, "max_new_tokens": RANGES["max_tokens"]}


def _checked(name: str, value, path):
    kind = _KINDS[name]
    ok = isinstance(value, bool) if kind is bool else (
        isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or value == int(value)))
    if not ok:
        raise file_error(path, f"'{name}' is {value!r}, not {'a number' if kind is float else 'an ' + kind.__name__}",
                         f"fix or remove '{name}' in {Path(path).name}")
    in_range, limit = _RANGES.get(name, (lambda v: True, ""))
    if not in_range(value):
        raise file_error(path, f"'{name}' is {value!r}, not {limit}", f"fix or remove '{name}' in {Path(path).name}")
    return kind(value)


def _eos_ids(value, path) -> tuple[int, ...]:
    if value is None:
        return ()
    ids = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise file_error(path, f"'eos_token_id' is {value!r}, not a token id or a list of them",
                         f"fix 'eos_token_id' in {Path(path).name}")
    return tuple(ids)
