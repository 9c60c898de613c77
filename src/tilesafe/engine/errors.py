"""The engine's errors: bad checkpoints and refused requests, both `ts.TileSafeError`s.

They point at the user's call (the `LLM(...)` or `generate(...)` line), name the file,
tensor, config field or request parameter at fault, and say what to do next.
"""
from ..errors import TileSafeError, caller_loc


class CheckpointError(TileSafeError):
    """A checkpoint folder, its config.json or one of its tensors cannot be used."""


class RequestError(TileSafeError):
    """A `generate` call's prompts or sampling parameters are refused (before any GPU work)."""


def checkpoint_error(message: str, help: str | None = None) -> CheckpointError:
    return CheckpointError(message, loc=caller_loc(), help=help)


def request_error(message: str, help: str | None = None) -> RequestError:
    return RequestError(message, loc=caller_loc(), help=help)
