"""Autotuning results on disk: a committed table in the package and a per-user cache.

Both are JSON files named after the device, `<slug>.json` (`nvidia-h200.json`; on the CPU
backends the backend's name), in the same shape as the kernel library's tuned tables:

    {"<module>.<kernel>": {"<shape class>": {"BM": 128, "num_warps": 8, "time_ms": 0.0412}}}

An entry is a config's keyword form plus the time it was measured at. The user cache
(`TILESAFE_CACHE_DIR/autotune/`) is written after each tuning; `ts.autotune.export()` merges
it into the committed table (`src/tilesafe/tuned/`) so a fresh machine need not retune.
Reading never fails: a missing, unreadable, corrupt or stale file or entry is a miss.
"""
from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

COMMITTED_DIR = Path(__file__).resolve().parent.parent / "tuned"


def device_slug(backend: str) -> str:
    """`"nvidia-h200"` for the current GPU on the `triton` backend; the backend's name on a CPU one."""
    if backend != "triton":
        return backend
    import torch
    return _gpu_slug(torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _gpu_slug(index: int) -> str:
    """Asked on every `tile=ts.auto` launch, so asked of the driver once per device."""
    import torch
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(index).lower()).strip("-")


@dataclass(frozen=True, slots=True)
class TunedFiles:
    """Where tuned results are read from (user cache first, then committed) and saved to."""
    committed: Path
    user: Path | None

    @staticmethod
    def default() -> "TunedFiles":
        from ..settings import SETTINGS
        return TunedFiles(COMMITTED_DIR, SETTINGS.cache_dir / "autotune")

    def lookup(self, slug: str, kernel_id: str, shape_class: str) -> tuple[dict, str] | None:
        """The stored entry and where it came from ("user cache" or "committed"), or None."""
        for where, folder in (("user cache", self.user), ("committed", self.committed)):
            if folder is None:
                continue
            entry = read_table(folder / f"{slug}.json").get(kernel_id, {})
            entry = entry.get(shape_class) if isinstance(entry, dict) else None
            if isinstance(entry, dict):
                return entry, where
        return None

    def save(self, slug: str, kernel_id: str, shape_class: str, entry: dict) -> bool:
        """Add one entry to the user cache; False (and nothing raised) when it cannot be written."""
        if self.user is None:
            return False
        path = self.user / f"{slug}.json"
        table = read_table(path)
        row = table.get(kernel_id)
        table[kernel_id] = row = row if isinstance(row, dict) else {}
        row[shape_class] = entry
        try:
            write_table(path, table)
        except OSError:
            return False
        return True

    def export(self, path=None, slug: str | None = None) -> Path:
        """Merge the user cache of `slug` (default: the current device) into `path` (default:
        the committed table); entries already there are kept unless retuned. Returns the path."""
        from ..settings import current_backend
        slug = slug or device_slug(current_backend())
        path = Path(path) if path is not None else self.committed / f"{slug}.json"
        if path.is_dir():
            path = path / f"{slug}.json"
        table = read_table(path)
        mine = read_table(self.user / f"{slug}.json") if self.user is not None else {}
        for kernel_id, rows in mine.items():
            if isinstance(rows, dict):
                old = table.get(kernel_id)
                table[kernel_id] = {**(old if isinstance(old, dict) else {}), **rows}
        write_table(path, table)
        return path


def read_table(path: Path) -> dict:
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def write_table(path: Path, table: dict) -> None:
    """Write atomically: a reader (another process tuning too) sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(table, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
