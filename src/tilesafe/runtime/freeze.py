"""`ts.freeze(t)`: memory that no launch writes again, so that a kernel may read it early.

Under programmatic dependent launch (`ts.pdl()`, `ts.graph(pdl=True)`) a kernel starts
while the kernel before it on the stream still runs, and waits for it (griddepcontrol.wait)
before its first memory access. A read of memory that kernel cannot be writing need not
wait: a decode step's weights are read-only for the whole step, and loading their first
tiles while the kernel before drains hides the GEMV's ramp-up. Frozen memory is the
runtime's guarantee that no such write exists:

* `freeze` waits for every write already queued (tilesafe's pending launches and the
  device's streams, so also torch's), then records the view's bytes — from its first to
  its last element — as frozen for as long as the memory lives;
* from then on every write of those bytes through tilesafe is refused (OwnershipError): a
  partition that reaches them (a kernel's output, a library call's `out=`), host writes
  (`x[...] = v`, `copy_`), an unsafe kernel's ts.Ptr and a SIMT kernel's outputs
  (`refuse_frozen_write`), a ts.distributed collective, and the replay of a graph captured
  before that writes them. Writes through torch are outside tilesafe's view (S13): freezing is
  also the caller's promise not to make them;
* a launch under PDL whose `ts.Ref` argument lies inside frozen bytes may issue that
  argument's leading loads — the tile loads a kernel starts with, before it touches any other
  memory — ahead of its wait (backends/triton/emit_prefetch.py). Only launches whose PDL is
  chosen by `ts.pdl(True)` or `ts.graph(pdl=True)` against the environment's default
  (`reads_early`) take that form: those are checked in full and never cached, while the
  launch caches reuse a layout's code for other tensors, which need not be frozen (with
  TILESAFE_PDL=1 eager launches keep their fast paths, and so every launch waits first —
  the same code eagerly and in a capture, which cannot compile).

A frozen view never thaws; the memory's state (and the record) ends when its storage is
freed, so reused addresses start unfrozen.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ..errors import LaunchError, OwnershipError, caller_loc
from ..lang.annotations import REF
from ..settings import pdl_var
from .aliasing import byte_set
from .constructors import from_torch
from .graph import refuse_in_capture
from .host_lock import LOCK
from .tensor import Tensor


def freeze(x):
    """Make the bytes of `x` (a ts.Tensor or a torch tensor) read-only for the rest of their
    memory's life, after the writes already queued; returns `x`. See the module docstring."""
    with LOCK:
        refuse_in_capture("ts.freeze (it waits for the queued writes)")
        if isinstance(x, Tensor):
            x._check_usable("ts.freeze")
            view, state = x._t, x._state
        elif isinstance(x, torch.Tensor):
            if x.layout is not torch.strided:
                raise LaunchError(f"ts.freeze takes a dense tensor, got layout {x.layout}", loc=caller_loc(),
                                  help="freeze the dense tensor the kernels read")
            borrowed = from_torch(x)      # S13/S14 as a launch borrows it: bytes torch wrote since a to_torch()
            view, state = borrowed._t, borrowed._state
        else:
            raise LaunchError(f"ts.freeze takes a ts.Tensor or a torch.Tensor, got {type(x).__name__}",
                              loc=caller_loc(), help="freeze the weights a step reads: ts.freeze(w)")
        if view.numel() == 0 or state.frozen_covers(view):
            return x                                                  # frozen already: nothing to wait for
        if not state.is_written(view):
            raise OwnershipError("ts.freeze of a tensor that has not been written (it came from ts.empty)",
                                 loc=caller_loc(), help="write it first: frozen memory is never written again")
        bs = byte_set(view)
        lender = state.lender_of(bs) if state._lent else None
        if lender is not None:
            raise OwnershipError("ts.freeze of a tensor whose bytes are lent to a partition", loc=caller_loc(),
                                 help="call .unpartition() first: a partition is a pending write")
        state.wait_for_host(bs, write=False, what="`ts.freeze`")     # tilesafe's queued writers (S9)
        if view.is_cuda:
            torch.cuda.synchronize(view.device)                       # and every stream's, torch's too
        state.freeze_range(bs.start, bs.end)
    return x


def refuse_frozen_write(kernel_name: str, name: str, state, view: torch.Tensor) -> None:
    """A launch that writes argument `name` (`view`, memory `state`) where no partition lends it
    — an unsafe kernel's ts.Ptr, a SIMT kernel's output — is refused when it reaches frozen bytes
    (a partition refuses them when it is made: Tensor._check_lendable)."""
    if state.frozen and state.touches_frozen(view):
        raise OwnershipError(f"argument `{name}` of `{kernel_name}` is written, but its bytes are frozen "
                             "(ts.freeze), and frozen memory is never written again",
                             help="write a copy instead: a frozen tensor (a model's weights) stays read-only, "
                                  "which lets kernels under ts.pdl() read it before they wait")


def reads_early() -> bool:
    """Whether a PDL launch now may read frozen inputs before its wait: PDL chosen by the
    context against the environment (settings.override_of_pdl), so checked in full."""
    return pdl_var.get() is True


def early_reads(kernel, bound, sched):
    """`sched` with `early`: the kernel's ts.Ref arguments that lie in frozen memory, whose
    leading loads may precede the PDL wait. The caller launches in full (no launch cache)."""
    names = []
    for name, f in bound.tensors.items():
        if kernel.param(name).kind != REF:
            continue
        t = f.ref() if callable(f.ref) else None
        if isinstance(t, Tensor) and t._state.frozen_covers(t._t):
            names.append(name)
    return replace(sched, early=frozenset(names)) if names else sched


def is_frozen(t: Tensor) -> bool:
    """Whether every byte of the ts.Tensor `t` (from its first element to its last) is frozen."""
    return bool(t._state.frozen) and t._state.frozen_covers(t._t)
