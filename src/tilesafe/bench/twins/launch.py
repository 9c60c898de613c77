"""Launching a raw Triton twin: compiled on a GPU, under Triton's interpreter on the CPU.

A twin is a plain `@triton.jit` function, written by hand the way a Triton user would,
with the tiling and schedule hints the tilesafe kernel used (see `observe.py`). On CUDA
tensors it launches like any Triton kernel; on CPU tensors (`--dry-run`, the tests) it
runs under Triton's interpreter through tilesafe's Triton adapter, which makes that work
in a process whose Triton is otherwise in compiled mode.
"""
from __future__ import annotations

import functools

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


def launch(fn, grid: tuple[int, ...], *args, options: dict | None = None, **consts) -> None:
    """`fn[grid](*args, **consts, **options)`, interpreted when the first tensor is on the CPU."""
    first = next(a for a in args if hasattr(a, "is_cuda"))
    if first.is_cuda:
        fn[grid](*args, **consts, **(options or {}))
        return
    from ...backends.triton import adapter
    named = dict(zip(fn.arg_names, args), **consts)
    adapter.launch(_interpreted(fn), grid, [named[name] for name in fn.arg_names], interpret=True)


@functools.lru_cache(maxsize=None)
def _interpreted(fn):
    from triton.runtime.interpreter import InterpretedFunction
    return InterpretedFunction(fn.fn)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pdl(facts) -> bool:
    """Whether the tilesafe launch used programmatic dependent launch (Triton's `launch_pdl`
    option, which the twin passes on too): the twin kernel then waits and triggers alike."""
    return bool(facts.options.get("launch_pdl", False))


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """A twin's first statement, as the tilesafe kernel's under programmatic dependent launch:
    wait for the kernel before it, then let the next one start launching."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
