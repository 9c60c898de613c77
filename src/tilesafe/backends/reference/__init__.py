"""The reference backend: a NumPy interpreter of the IR, with the sanitizer (CPU, tests)."""
from ..registry import register_backend


def _make(name: str):
    from .backend import ReferenceBackend
    return ReferenceBackend()


register_backend("reference", _make)
