"""Where a run happened: the GPU (or CPU), software versions and the git commit."""
from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]          # src/tilesafe/bench -> the checkout


def gpu_slug(name: str | None = None) -> str:
    """`"h200"` for "NVIDIA H200": the results folder of a GPU ("cpu" without one)."""
    if name is None:
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return re.sub(r"^nvidia-", "", slug) or "gpu"


def info() -> dict:
    out = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
           "python": platform.python_version()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        out.update(gpu=p.name, gpu_slug=gpu_slug(p.name), capability=f"{p.major}.{p.minor}",
                   sms=p.multi_processor_count, memory_bytes=p.total_memory,
                   l2_bytes=getattr(p, "L2_cache_size", None), driver=_driver())
    else:
        out.update(gpu=None, gpu_slug="cpu")
    return out


def versions() -> dict:
    import numpy
    import tilesafe
    out = {"tilesafe": tilesafe.__version__, "torch": torch.__version__, "cuda": torch.version.cuda,
           "numpy": numpy.__version__}
    try:
        import triton
        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    if torch.cuda.is_available():
        out["cudnn"] = torch.backends.cudnn.version()
    return out


def git(commit: str | None = None) -> dict:
    """The checkout's commit and whether it had uncommitted changes; `commit` when given
    (a copy of the tree without .git, as on the device machine, passes it in)."""
    if commit:
        return {"commit": commit, "dirty": None, "source": "--commit"}
    try:
        head = _run(["git", "rev-parse", "HEAD"])
        dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]))
        return {"commit": head, "dirty": dirty, "source": "git"}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "source": "unknown"}


def _run(cmd) -> str:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True, timeout=10).stdout.strip()


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
