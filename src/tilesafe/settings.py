"""Settings read from the environment once, and the per-context state of a program.

The environment is read in exactly one place (`Settings.from_env`). What can change while
a program runs — the backend, the stream, the graph being captured, strictness — lives in
context variables, so threads and asyncio tasks each see their own.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("reference", "triton", "triton-interpreter")


@dataclass(frozen=True, slots=True)
class Settings:
    backend: str | None   # None: Triton when CUDA is available, else the reference backend
    cache_dir: Path
    dump: bool
    sanitize: bool        # run the reference sanitizer for safe kernels too

    @staticmethod
    def from_env(env=os.environ) -> "Settings":
        backend = env.get("TILESAFE_BACKEND") or None
        if backend is not None and backend not in BACKENDS:
            from .errors import LaunchError
            raise LaunchError(f"TILESAFE_BACKEND={backend!r} is not a backend",
                              help=f"use one of {', '.join(BACKENDS)}")
        cache = env.get("TILESAFE_CACHE_DIR") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tilesafe")
        return Settings(backend=backend, cache_dir=Path(cache),
                        dump=env.get("TILESAFE_DUMP", "") not in ("", "0"),
                        sanitize=env.get("TILESAFE_SANITIZE", "") not in ("", "0"))


SETTINGS = Settings.from_env()

backend_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("tilesafe_backend", default=None)
strict_var: contextvars.ContextVar[bool] = contextvars.ContextVar("tilesafe_strict", default=False)
launching_disabled_var: contextvars.ContextVar[bool] = contextvars.ContextVar("tilesafe_no_launch", default=False)
graph_var: contextvars.ContextVar[object] = contextvars.ContextVar("tilesafe_graph", default=None)


def current_backend() -> str:
    """The backend a launch uses now: context override, then environment, then auto."""
    chosen = backend_var.get() or SETTINGS.backend
    if chosen is not None:
        return chosen
    return "triton" if _cuda_available() else "reference"


@functools.lru_cache(maxsize=None)
def _cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@contextlib.contextmanager
def backend(name: str):
    """`with ts.backend("reference"):` runs the launches inside on that backend."""
    if name not in BACKENDS:
        from .errors import LaunchError
        raise LaunchError(f"{name!r} is not a backend", help=f"use one of {', '.join(BACKENDS)}")
    token = backend_var.set(name)
    try:
        yield
    finally:
        backend_var.reset(token)


@contextlib.contextmanager
def strict_sync(enabled: bool = True):
    """Inside, every implicit host wait for pending device work is an OwnershipError."""
    token = strict_var.set(enabled)
    try:
        yield
    finally:
        strict_var.reset(token)
