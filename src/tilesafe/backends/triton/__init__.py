"""The Triton backends: generated Triton on a GPU ("triton") or under Triton's CPU interpreter."""
from ..registry import register_backend


def _make(name: str):
    from .backend import TritonBackend
    return TritonBackend.make(name)


register_backend("triton", _make)
register_backend("triton-interpreter", _make)
