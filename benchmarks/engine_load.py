"""Load time of `LLM(path)` on a random Qwen3 checkpoint written to disk (`benchmarks/engine.py
--load-sizes 4b`; the issue measures it at 4B: a 32B checkpoint, 65.5 GB, does not fit the
H200 machine's 64 GB disk).

The checkpoint is what `tilesafe generate --random-weights` writes: config.json,
generation_config.json, Qwen3's tokenizer files (when installed) and the bf16 weights as
safetensors in the Hub's layout (4 GiB shards and their index), drawn on the GPU and saved
from the host. The files are then flushed and dropped from the page cache
(`posix_fadvise(DONTNEED)` on each: no privileges needed), so that the first `LLM(path)`
reads them from the disk; the second, right after, finds them in the page cache. Each load
is timed from the call to a synchronised GPU (config, tokenizer, weights read straight to the
device, packed, the KV cache allocated) and reported with the safetensors bytes per second.
The loaded embedding is compared with the one `LLM.from_random` draws for the same seed (the
same generator on the same device): the files hold what was written. The folder is deleted
at the end, whatever happened.
"""
from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.checkpoint import weight_bytes
from tilesafe.engine.config import Qwen3Config
from tilesafe.engine.random_checkpoint import qwen3_config, random_weights, write_checkpoint

DISK_MARGIN = 1.15          # the checkpoint's bytes and this much room besides


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def checkpoint_bytes(size: str) -> int:
    """The bf16 weights' bytes of `size` as written (a tied embedding once)."""
    return weight_bytes(Qwen3Config.from_dict(qwen3_config(size), size), 2)


def estimate_s(size: str) -> float:
    """A guess of the part's seconds: writing at 0.5 GB/s, two loads at 1 GB/s, the rest."""
    nbytes = checkpoint_bytes(size)
    return 15 + nbytes / 0.5e9 + 2 * nbytes / 1e9


def evict(folder: Path) -> dict[str, int]:
    """Flush every file of `folder` to the disk and drop it from the page cache; bytes by file."""
    sizes = {}
    for path in sorted(folder.iterdir()):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            sizes[path.name] = os.fstat(fd).st_size
        finally:
            os.close(fd)
    return sizes


def has_tokenizer() -> bool:
    from tilesafe.engine.qwen3_files import tokenizer_dir
    try:
        tokenizer_dir()
        return True
    except Exception:       # noqa: BLE001 - the package is optional: the checkpoint goes without it
        return False


def load_time(size: str, device: str = "cuda", ckpt_dir: str | None = None, seed: int = 0) -> dict:
    """Write the checkpoint, then time a first (cold) and a second (warm) `LLM(path)`."""
    root = Path(ckpt_dir or tempfile.gettempdir())
    need = checkpoint_bytes(size)
    free = shutil.disk_usage(root).free
    if free < need * DISK_MARGIN:
        return {"skipped": f"{size}: {need / 1e9:.1f} GB of weights, {free / 1e9:.1f} GB free in {root}"}
    folder = Path(tempfile.mkdtemp(prefix=f"qwen3-{size}-random-", dir=root))
    out: dict = {"size": size, "folder": str(folder), "weight_bytes": need}
    try:
        tokenizer = has_tokenizer()
        t = time.perf_counter()
        write_checkpoint(folder, size, seed=seed, dtype="bfloat16", device=device, tokenizer=tokenizer)
        out["write_s"] = time.perf_counter() - t
        t = time.perf_counter()
        files = evict(folder)
        out["flush_s"] = time.perf_counter() - t
        out["files"] = files
        out["file_bytes"] = sum(files.values())
        out["safetensors_bytes"] = sum(n for name, n in files.items() if name.endswith(".safetensors"))
        out["tokenizer"] = tokenizer
        for name in ("first", "second"):
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            t = time.perf_counter()
            llm = LLM(str(folder), device=device, dtype="bfloat16", max_model_len=256, max_num_seqs=1,
                      progress=False)
            sync()
            s = time.perf_counter() - t
            out[name] = {"seconds": s, "safetensors_bytes_per_s": out["safetensors_bytes"] / s}
            if name == "second":
                out["matches_random"] = _matches_random(llm, size, seed, device)
                params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
                out["generates"] = len(llm.generate({"prompt_token_ids": [1, 2, 3]}, params)[0].outputs[0].token_ids)
            del llm
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    out["cold_over_warm"] = out["first"]["seconds"] / out["second"]["seconds"]
    return out


def _matches_random(llm: LLM, size: str, seed: int, device: str) -> bool:
    """The loaded embedding equals the one random_weights draws for this seed on this device."""
    name, embed = next(iter(random_weights(qwen3_config(size), seed, torch.bfloat16, device)))
    assert name == "model.embed_tokens.weight", name
    return bool(torch.equal(llm.model.w.embed, embed))
