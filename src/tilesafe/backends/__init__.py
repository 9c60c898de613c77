"""Backends: Triton (GPU, and Triton's CPU interpreter) and the reference NumPy interpreter.

Each registers itself by name (registry.py) when its package is imported, which is cheap:
the code behind a name is imported when a launch first asks for it.
"""
from . import reference, triton  # noqa: F401  (registers "reference", "triton", "triton-interpreter")
