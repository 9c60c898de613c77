"""Which tensors a launch addresses through TMA tensor descriptors (Hopper's copy engine).

`layout` says how TMA can address one tensor (or that it cannot); the backend asks it for
each argument of a launch that uses descriptors, and the code generator
(`emit_memory`) then uses a descriptor for that tensor's eligible tile accesses.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

from ...lang.annotations import OUTPUTS, REF


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether the current GPU has the tensor memory accelerator (NVIDIA compute capability
    9.0+; a ROCm torch reports AMD GPUs as CUDA devices, the MI300X as capability 9.4)."""
    import torch
    return (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
            and torch.cuda.get_device_capability()[0] >= 9)


def layout(shape, strides, itemsize: int, address: int = 0, any_rank: bool = False) -> str | None:
    """How TMA can address a 2-D tensor: "rows" (contiguous rows), "columns" (contiguous
    columns, e.g. a transposed view), or None; with `any_rank`, tensors of rank 3 to 5 with
    contiguous last axis too ("rows"). TMA needs a 16-byte aligned base, 16-byte multiples
    between the starts of its lines, and lines a multiple of 16 bytes long: on the H200 a
    shorter last 16 bytes of a line was read and written whole, past the tensor's edge.
    Outputs a kernel loads back stay on pointers (S15's barriers order pointer accesses
    only): callers leave those out."""
    if address % 16 or 0 in shape:   # (TMA describes no empty tensor)
        return None
    if any_rank and 3 <= len(shape) <= 5:
        ok = strides[-1] == 1 and (shape[-1] * itemsize) % 16 == 0
        return "rows" if ok and all((s * itemsize) % 16 == 0 for s in strides[:-1]) else None
    if len(shape) != 2:
        return None
    if strides[1] == 1 and (strides[0] * itemsize) % 16 == 0 and (shape[1] * itemsize) % 16 == 0:
        return "rows"
    if strides[0] == 1 and (strides[1] * itemsize) % 16 == 0 and (shape[0] * itemsize) % 16 == 0:
        return "columns"
    return None


def tensors(layouts: dict, kind: str | None = None) -> frozenset:
    """The tensors with a layout (of `kind`, when given)."""
    return frozenset(n for n, v in layouts.items() if v and (kind is None or v == kind))


def policy(forced: bool | None, multiplies: bool, hopper: bool) -> tuple[bool, bool]:
    """(use TMA descriptors, for tensors of any rank): a forced choice (`tma=` or the
    backend's setting) is taken as it is and reaches tensors of rank 3 to 5; the automatic
    one is on for kernels that multiply tiles on Hopper, matrices only (measured there)."""
    if forced is not None:
        return forced, forced
    return multiplies and hopper, False


def choose(kernel, reloaded, arrays: dict, any_rank: bool) -> tuple[frozenset, frozenset]:
    """(tensors through TMA, those of them described by columns) of a launch; `arrays` maps
    parameter name -> (shape, strides, itemsize, address). Outputs the kernel loads back
    (`reloaded`) stay on pointers, which S15's barriers order."""
    layouts = {name: layout(*array, any_rank) for name, array in arrays.items()
               if kernel.param(name).kind in (REF, *OUTPUTS) and name not in reloaded}
    return tensors(layouts), tensors(layouts, "columns")


def host_descriptor(t, box: tuple, transposed: bool):
    """The TMA descriptor a launch passes for torch tensor `t` with boxes of `box` (Triton
    encodes it on the host as the kernel starts); a matrix with contiguous columns is
    described as its transpose."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    if transposed:
        return TensorDescriptor(t, [t.shape[1], t.shape[0]], [t.stride(1), 1], list(box))
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(box))


class Address(int):
    """A device address that answers `data_ptr()` as a tensor does: Triton's launcher asks a
    descriptor's base for it (in C, no Python frame)."""
    __slots__ = ()
    data_ptr = int.__int__


class LayoutDescriptor(NamedTuple):
    """What Triton's launcher reads of a host TMA descriptor (`TensorDescriptor`'s fields),
    for a launch whose layout was checked when its entry was made: the base's 16-byte
    alignment (the launch checks its address's class), the line strides, the extents and
    the box are the layout's, so the constructor's validation would find nothing new."""
    base: Address
    shape: list
    strides: list
    block_shape: list
    padding: str


def layout_descriptor(shape, strides, box, transposed: bool) -> tuple:
    """(shape, strides, box) of the descriptor `host_descriptor` makes for a view of this
    shape and these element strides; a launch puts its address in front (`LayoutDescriptor`)."""
    if transposed:
        return [shape[1], shape[0]], [strides[1], 1], list(box)
    return list(shape), list(strides), list(box)
