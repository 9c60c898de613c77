"""The checks of one library call as a whole, made before its first launch.

A library function may run several kernels: a split-K product and its sum, an add and
then a norm, one launch per slab of a strided layout. The runtime checks each launch on its
own (S7), which is not enough for a call: an `out` that aliases the weight of the second
kernel passes the first launch, which writes, and is refused (or, when the aliased input is
not an argument of the later launch, never seen) only after the caller's memory changed.
So every call checks the tensors its caller passed, together and by the names the caller
used, before anything runs; the per-launch check still runs underneath (defence in depth).

- Autograd: an input that requires grad while torch records (grad mode on) is refused.
  The kernels compute no gradients, and a result without a `grad_fn` is the one silently
  wrong answer; under `torch.no_grad()` / `torch.inference_mode()` nothing is recorded.
- Aliasing: every output is compared, by bytes (runtime/aliasing.py: exact for contiguous
  ranges and strided lattices, otherwise conservative), with itself, every input and every
  other output. An output may be the *very same view* as an input only where the function
  declares that pair in place: elementwise functions, where each output element depends
  only on the input elements at its own index, and `rms_norm`'s `residual_out=residual`.
  Their kernels take that output as the `ts.Mut` and read the input back through
  `z.load()` of the block's own tile, so the launch itself never sees an alias.

Outputs the library allocates (`out=None`) are fresh memory and are not passed here.
"""
from __future__ import annotations

import torch

from ..errors import AliasError, LaunchError, caller_loc
from ..runtime.aliasing import byte_set, overlaps, self_overlaps
from ..runtime.tensor import Tensor
from .call_recording import ACTIVE
from .layout import same_view


def refuse_autograd(x: torch.Tensor, name: str, fn: str) -> None:
    """Refuse a torch argument that autograd would track: its result would have no gradient."""
    if x.requires_grad and torch.is_grad_enabled():
        raise LaunchError(f"{fn}: `{name}` requires grad, but tilesafe kernels compute no gradients: the result "
                          "would silently have none", loc=caller_loc(),
                          help="call it under `with torch.no_grad():` or `torch.inference_mode()`, "
                               f"or pass `{name}.detach()`")


def check_aliasing(fn: str, inputs: dict[str, Tensor | None], outputs: dict[str, Tensor | None],
                   in_place: dict[str, tuple[str, ...]] | None = None) -> None:
    """Refuse outputs that overlap themselves, an input or each other, before any launch.

    `inputs` and `outputs` map the caller's argument names to tensors (None: not passed);
    `in_place[out]` names the inputs that `out` may be exactly (the same view of the same
    bytes). Only outputs the caller passed are checked. Most pairs are settled by their
    address spans (a few attribute reads); only spans that meet pay for the exact byte-set
    comparison, and only a non-contiguous output for the self-overlap test.
    """
    if (rec := ACTIVE.get()) is not None:     # a call plan checks again (call_recording)
        rec.checked(fn, inputs, outputs, in_place)
    outs = [(n, t) for n, t in outputs.items() if t is not None]
    if not outs:
        return
    ins = [(n, t) for n, t in inputs.items() if t is not None]
    views = {n: _torch(t) for n, t in (*outs, *ins)}
    spans = {n: _span(v) for n, v in views.items()}
    for i, (name, out) in enumerate(outs):
        if not views[name].is_contiguous() and self_overlaps(byte_set(views[name])):
            raise _alias(fn, f"`{name}` overlaps itself (a stride-0 or overlapping view), so its elements would "
                             "be written more than once", f"pass a tensor whose elements are distinct for `{name}`")
        for other, _ in outs[:i]:
            if _meet(spans[name], spans[other]) and _exact(views[name], views[other]):
                raise _alias(fn, f"`{other}` and `{name}` share memory", "pass separate tensors for the outputs")
        allowed = (in_place or {}).get(name, ())
        for other, t in ins:
            if not _meet(spans[name], spans[other]):
                continue
            if other in allowed and same_view(out, t):
                continue     # the declared in-place form: the kernel reads its own tile back
            if _exact(views[name], views[other]):
                raise _alias(fn, f"`{name}` shares memory with the input `{other}`", _help(name, other, allowed))


def _torch(t) -> torch.Tensor:
    """The torch view behind a tilesafe tensor (a workspace may also hold torch tensors)."""
    return t if isinstance(t, torch.Tensor) else t._torch()


def _span(t: torch.Tensor):
    """(first byte, one past the last byte) of a view, None when it is empty. Torch strides
    are never negative, so the view's first element is its lowest address."""
    lo = t.data_ptr()
    if t.is_contiguous():
        return lo, lo + t.nbytes
    if t.numel() == 0:
        return None
    item = t.element_size()
    return lo, lo + item + item * sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def _meet(sa, sb) -> bool:
    """Whether two address spans meet: needed to share a byte (on one device; `_exact` then
    compares devices too)."""
    return not (sa is None or sb is None or sa[1] <= sb[0] or sb[1] <= sa[0])


def _exact(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two views whose spans meet share a byte (runtime/aliasing.py's exact test,
    which also tells devices apart)."""
    return overlaps(byte_set(a), byte_set(b))


def workspace_outputs(workspace, fields: tuple[str, ...]) -> dict[str, Tensor]:
    """A caller's `workspace=` as outputs named `workspace.<field>` (none when not passed:
    the call then made a fresh one)."""
    if workspace is None:
        return {}
    return {f"workspace.{f}": getattr(workspace, f) for f in fields}


def _help(name: str, other: str, allowed: tuple[str, ...]) -> str:
    if other in allowed:
        return (f"`{name}={other}` (the very same view) updates `{other}` in place; a view that only partly "
                "overlaps it is refused, since blocks would overwrite elements others still read")
    return f"pass a separate tensor for `{name}`: this function cannot write over its input `{other}`"


def _alias(fn: str, message: str, help: str) -> AliasError:
    return AliasError(f"{fn}: {message}", loc=caller_loc(), help=help)
