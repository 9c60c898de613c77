"""Backends by name: each backend registers a factory, the runtime looks a backend up by the
name a launch runs on (`ts.backend(...)`, TILESAFE_BACKEND). A backend is made on its first
lookup, so a backend that cannot run here (Triton without a GPU) costs nothing until asked
for, and its refusal says why."""
from __future__ import annotations

from typing import Callable

from ..errors import LaunchError
from ..settings import add_backend_name
from .protocol import Backend

_factories: dict[str, Callable[[str], Backend]] = {}
_made: dict[str, Backend] = {}


def register_backend(name: str, factory: Callable[[str], Backend]) -> None:
    """Make `factory(name)` the backend called `name` (replacing one registered before)."""
    _factories[name] = factory
    _made.pop(name, None)
    add_backend_name(name)          # `ts.backend(name)` and TILESAFE_BACKEND=name choose it


def backend_names() -> tuple[str, ...]:
    return tuple(_factories)


def backend_named(name: str) -> Backend:
    """The backend called `name`; a LaunchError listing the known names for an unknown one."""
    backend = _made.get(name)
    if backend is None:
        factory = _factories.get(name)
        if factory is None:
            raise LaunchError(f"{name!r} is not a backend", help=f"use one of {', '.join(_factories)}")
        backend = _made[name] = factory(name)
    return backend
