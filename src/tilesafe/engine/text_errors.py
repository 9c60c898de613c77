"""The errors of the engine's text side: a model folder's text files, and text input.

Both are `TileSafeError`s located at the user's call (the first frame outside tilesafe), so
a missing tokenizer.json reads like any other tilesafe error: what is wrong, where the call
was, and what to do next. A model file's error is a `CheckpointError` and a refused text input
a `RequestError`, so `except CheckpointError` covers every problem of a model folder.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import caller_loc
from .errors import CheckpointError, RequestError


class ModelFileError(CheckpointError):
    """A file of a model folder (tokenizer.json, tokenizer_config.json, a chat template,
    generation_config.json) is missing or malformed. The message names the file."""


class TextInputError(RequestError):
    """Text-side input the engine cannot use: a prompt that is not a str, chat messages of the
    wrong shape, or messages the chat template refused."""


def file_error(path: Path | str, problem: str, help: str) -> ModelFileError:
    return ModelFileError(f"{path}: {problem}", caller_loc(), help)


def input_error(problem: str, help: str) -> TextInputError:
    return TextInputError(problem, caller_loc(), help)


def read_json(path: Path, what: str) -> dict:
    """The JSON object in `path`, or a ModelFileError naming the file and what it should hold."""
    import json
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise file_error(path, f"no such file (the {what})",
                         f"pass a Hugging Face model folder that has {path.name}") from None
    except OSError as e:
        raise file_error(path, f"cannot be read: {e.strerror}", "check the file's permissions") from None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise file_error(path, f"is not valid JSON ({e})", f"restore {path.name} from the model's release") from None
    if not isinstance(value, dict):
        raise file_error(path, f"holds a JSON {type(value).__name__}, not an object",
                         f"restore {path.name} from the model's release")
    return value
