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

BACKENDS = ("reference", "triton", "triton-interpreter")   # the built-in backends
# Names `ts.backend(...)` and TILESAFE_BACKEND accept: the built-in ones and every backend
# registered since (backends/registry.py adds them through `add_backend_name`).
_NAMES: dict[str, None] = dict.fromkeys(BACKENDS)
_SWITCH = {"": False, "0": False, "false": False, "no": False, "off": False,
           "1": True, "true": True, "yes": True, "on": True}


@dataclass(frozen=True, slots=True)
class Settings:
    """The TILESAFE_* environment as read at import, checked where each value is first used.

    Reading never fails, so `import tilesafe` and `tilesafe --version` work whatever the
    environment says; a bad value is a LaunchError from the first launch that needs it.
    """
    backend_text: str     # TILESAFE_BACKEND as set ("" when unset)
    cache_dir: Path
    dump_text: str        # TILESAFE_DUMP as set
    sanitize_text: str    # TILESAFE_SANITIZE as set
    pdl_text: str = ""    # TILESAFE_PDL as set

    @staticmethod
    def from_env(env=os.environ) -> "Settings":
        cache = env.get("TILESAFE_CACHE_DIR") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tilesafe")
        return Settings(backend_text=env.get("TILESAFE_BACKEND", "").strip(), cache_dir=Path(cache),
                        dump_text=env.get("TILESAFE_DUMP", ""), sanitize_text=env.get("TILESAFE_SANITIZE", ""),
                        pdl_text=env.get("TILESAFE_PDL", ""))

    @property
    def backend(self) -> str | None:
        """The backend TILESAFE_BACKEND names; None: Triton when CUDA is available, else the reference backend."""
        if not self.backend_text:
            return None
        if self.backend_text not in _NAMES:
            raise _bad_setting("TILESAFE_BACKEND", self.backend_text, "a backend",
                               f"set it to one of {', '.join(_NAMES)}, or unset it to choose by the machine")
        return self.backend_text

    @property
    def dump(self) -> bool:
        """TILESAFE_DUMP: print each new specialization's IR and Triton source to stderr."""
        return _switch("TILESAFE_DUMP", self.dump_text)

    @property
    def sanitize(self) -> bool:
        """TILESAFE_SANITIZE: run the reference sanitizer for safe kernels too."""
        return _switch("TILESAFE_SANITIZE", self.sanitize_text)

    @property
    def pdl(self) -> bool:
        """TILESAFE_PDL: launches on a Hopper (or newer) GPU use programmatic dependent launch
        (see `pdl`), eagerly and in captured graphs."""
        return _switch("TILESAFE_PDL", self.pdl_text)


def _switch(name: str, text: str) -> bool:
    value = _SWITCH.get(text.strip().lower())
    if value is None:
        raise _bad_setting(name, text, "an on/off switch", f"set {name}=1 to turn it on, or 0 (or unset it) for off")
    return value


def _bad_setting(name: str, text: str, what: str, help: str):
    """A LaunchError pointing at the user's line that first needed the setting."""
    from .errors import LaunchError, caller_loc
    return LaunchError(f"the environment variable {name}={text!r} is not {what}", caller_loc(), help)


SETTINGS = Settings.from_env()

backend_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("tilesafe_backend", default=None)
strict_var: contextvars.ContextVar[bool] = contextvars.ContextVar("tilesafe_strict", default=False)
launching_disabled_var: contextvars.ContextVar[bool] = contextvars.ContextVar("tilesafe_no_launch", default=False)
graph_var: contextvars.ContextVar[object] = contextvars.ContextVar("tilesafe_graph", default=None)
# An override of TILESAFE_PDL (`with ts.pdl(...)`, `ts.graph(pdl=...)`); None: the environment decides.
pdl_var: contextvars.ContextVar[bool | None] = contextvars.ContextVar("tilesafe_pdl", default=None)


def add_backend_name(name: str) -> None:
    """Let `ts.backend(name)` and TILESAFE_BACKEND=name choose a backend registered under `name`."""
    _NAMES[name] = None


def current_backend() -> str:
    """The backend a launch uses now: context override, then environment, then auto."""
    chosen = backend_var.get()
    if chosen is not None:
        return chosen
    settings, chosen = _from_environment
    if settings is SETTINGS:      # every launch and library call asks: no hash of the settings
        return chosen
    return _remember_environment_backend()


_from_environment: tuple = (None, None)    # (the settings, the backend they choose): one tuple, swapped whole


def _remember_environment_backend() -> str:
    global _from_environment
    settings = SETTINGS
    chosen = _environment_backend(settings)
    _from_environment = (settings, chosen)
    return chosen


@functools.lru_cache(maxsize=8)
def _environment_backend(s: Settings) -> str:
    """The backend the environment chooses, worked out once per settings (every launch asks;
    a bad value raises, and a raise is not cached: each launch that needs it reports it)."""
    chosen = s.backend
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
    if name not in _NAMES:
        from .errors import LaunchError
        raise LaunchError(f"{name!r} is not a backend", help=f"use one of {', '.join(_NAMES)}")
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


def pdl_launches() -> bool:
    """Whether a launch now uses programmatic dependent launch: the context's override, else TILESAFE_PDL."""
    chosen = pdl_var.get()
    return SETTINGS.pdl if chosen is None else chosen


def pdl(enabled: bool = True) -> contextlib.AbstractContextManager:
    """`with ts.pdl():` the launches inside use programmatic dependent launch on a Hopper or
    newer GPU (ignored elsewhere, and by the CPU backends): each kernel may start while the
    one before it on the stream finishes, and waits for it (`griddepcontrol.wait`) before
    its first memory access. Results and ordering are those of plain launches. Run a body
    once under `ts.pdl()` before capturing it with `ts.graph(pdl=True)`, so that its PDL
    code is compiled outside the capture. A choice that differs from TILESAFE_PDL makes
    each launch inside take the full launch path (its plan is not cached)."""
    if not isinstance(enabled, bool):
        from .errors import LaunchError, caller_loc
        raise LaunchError(f"ts.pdl({enabled!r}): the switch must be True or False", caller_loc(),
                          help="with ts.pdl(): ...   or   with ts.pdl(False): ...")
    return _pdl(enabled)


@contextlib.contextmanager
def _pdl(enabled: bool):
    token = pdl_var.set(override_of_pdl(enabled))
    try:
        yield
    finally:
        pdl_var.reset(token)


def override_of_pdl(enabled: bool) -> bool | None:
    """What `pdl_var` holds for a choice: None where it is the environment's own, so launches
    keep the fast paths (whose cached plans were made under the environment's choice)."""
    return None if enabled == SETTINGS.pdl else enabled
