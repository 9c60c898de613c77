"""Where `LLM(model)` finds a checkpoint: a local folder, or a Hugging Face hub id
("Qwen/Qwen3-4B") fetched with `huggingface_hub.snapshot_download` into its cache (offline,
`HF_HUB_OFFLINE=1`, the cached snapshot is used as it is).

Only the files a Qwen3 checkpoint is read from are fetched (`HUB_FILES`): config.json,
generation_config.json, the safetensors shards and their index, and the tokenizer's files —
tokenizer.json, tokenizer_config.json, vocab.json / merges.txt, and chat_template.jinja, where
transformers 5 saves the chat template (no longer inside tokenizer_config.json). Other
formats a repository may also hold (PyTorch .bin, GGUF, ONNX) are not downloaded.
"""
from __future__ import annotations

from os import PathLike, fspath
from pathlib import Path, PurePath

from .errors import checkpoint_error

HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.jinja"]


def is_hub_id(model) -> bool:
    """"owner/name" that is not an existing path nor spelled as one (./x, /x, ~/x)."""
    text = str(model)
    return not Path(model).exists() and not text.startswith((".", "/", "~")) and text.count("/") == 1


def model_dir(model) -> Path:
    """The local folder of `model`: itself, or the hub snapshot it names (downloaded if needed)."""
    # None, 5, "": a TypeError or the current folder. pathlib reads Path("") as Path("."), so a
    # Path with no parts is refused too: the current folder is spelled "." or Path.cwd().
    empty_path = isinstance(model, PurePath) and not model.parts
    if not isinstance(model, (str, PathLike)) or not fspath(model) or empty_path:
        raise checkpoint_error(f"model must be a checkpoint folder or a hub id ('owner/name'), got {model!r}"
                               + (" (Path('') is Path('.'))" if empty_path else ""),
                               help='e.g. LLM("path/to/Qwen3-4B") or LLM("Qwen/Qwen3-4B"); the current folder: '
                                    'LLM(".")')
    if not is_hub_id(model):
        path = Path(model)
        if not path.is_dir():
            raise checkpoint_error(f"checkpoint folder {model} does not exist",
                                   help="pass a folder holding config.json and *.safetensors, or a hub id")
        return path
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(str(model), allow_patterns=HUB_FILES))
    except Exception as e:   # offline, unknown id, no access: the hub client's many error types
        raise checkpoint_error(f"cannot fetch {model!r} from the Hugging Face hub: {e}",
                               help="download it first and pass the local folder") from None
