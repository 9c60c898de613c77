"""`ts.distributed`: collectives over `torch.distributed`, ordered like launches.

    ts.distributed.all_reduce(x)              # sum over the ranks, in place
    ts.distributed.all_gather(x, out=y)       # y = the ranks' x stacked along axis 0
    ts.distributed.broadcast(x, src=0)        # every rank's x = rank src's

A collective is NCCL's code (gloo's on a CPU), the one kind of device work that is not a
tilesafe kernel. It still reads and writes a tensor's bytes, so it goes through the same
bookkeeping as a launch:
- S8/S13: the tensor must be usable (not lent to a partition, not handed over to torch);
  S18: what it writes must not be frozen (ts.freeze);
- S14: what it reads must have been written; what it writes counts as written after it;
- S9/S10: on a GPU the current stream first waits for conflicting work on other streams,
  the collective runs ordered on the current stream (torch makes it wait for NCCL's
  stream), and its accesses are registered as pending, so a host read waits for it and a
  launch on another stream is ordered after it. On a CPU a collective is finished when the
  call returns, unless `async_op=True`: gloo's thread then runs it, and its accesses stay
  pending until it finishes, so host reads, host writes and launches wait for it (inside
  `ts.strict_sync()` such an implicit wait is an OwnershipError);
- S12: inside `ts.graph()` it is recorded with the capture (NCCL collectives are captured
  into the CUDA graph); `async_op=True` and allocating `out` are refused there.

A failed collective (a rank that exited, a timeout, ranks disagreeing on a size) is a
`DistributedError` naming the collective, never a hang: gloo honours the process group's
timeout, and NCCL's watchdog aborts a collective that passes it.
"""
from __future__ import annotations

import torch

from ..errors import LaunchError, caller_loc
from ..settings import graph_var
from .constructors import from_torch
from .future import Completion, Future
from .graph import refuse_in_capture
from .host_lock import serialized
from .tensor import Tensor


class DistributedError(LaunchError):
    """A collective (or the process group it needs) failed: no group, a rank gone, a timeout."""


def is_initialized() -> bool:
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized()


def rank(group=None) -> int:
    """This process's rank (0 without a process group)."""
    import torch.distributed as dist
    return dist.get_rank(group) if is_initialized() else 0


def world_size(group=None) -> int:
    """The number of ranks (1 without a process group)."""
    import torch.distributed as dist
    return dist.get_world_size(group) if is_initialized() else 1


@serialized
def all_reduce(x, *, group=None, async_op: bool = False) -> Future:
    """Sum `x` over the ranks, in place; returns a Future whose `sync()` gives `x`."""
    import torch.distributed as dist
    t = _tensor(x, "all_reduce")
    return _collective("all_reduce", [(t, True, True)], (x,), async_op,
                       lambda: dist.all_reduce(t._torch(), group=group, async_op=async_op))


@serialized
def all_gather(x, out=None, *, group=None, async_op: bool = False) -> Future:
    """Every rank's `x` (N, ...) stacked along axis 0 into `out` (ranks x N, ...), rank 0's
    first; `out` is allocated when not given (refused inside ts.graph())."""
    import torch.distributed as dist
    t = _tensor(x, "all_gather")
    n = world_size(group)
    want = (n * t._torch().shape[0], *t._torch().shape[1:]) if t._torch().dim() else (n,)
    if out is None:
        if graph_var.get() is not None:
            raise DistributedError("all_gather: allocating `out` is not allowed while capturing ts.graph()",
                                   loc=caller_loc(), help="allocate it before the capture and pass out=...")
        out = torch.empty(want, dtype=t._torch().dtype, device=t._torch().device)
    o = _tensor(out, "all_gather")
    if tuple(o._torch().shape) != want or o._torch().dtype != t._torch().dtype:
        raise DistributedError(f"all_gather: `out` must be {want} {t._torch().dtype} for {n} ranks of "
                               f"{tuple(t._torch().shape)}, got {tuple(o._torch().shape)} {o._torch().dtype}",
                               loc=caller_loc(), help="pass out of shape (world_size * x.shape[0], *x.shape[1:])")
    for name, v in (("x", t), ("out", o)):
        if not v._torch().is_contiguous():
            raise DistributedError(f"all_gather: `{name}` must be contiguous", loc=caller_loc(),
                                   help="gather into (and from) contiguous tensors")
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return _collective("all_gather", [(t, True, False), (o, False, True)], (out,), async_op,
                       lambda: gather(o._torch(), t._torch(), group=group, async_op=async_op))


@serialized
def broadcast(x, src: int = 0, *, group=None, async_op: bool = False) -> Future:
    """Every rank's `x` becomes rank `src`'s (read there, written elsewhere)."""
    import torch.distributed as dist
    t = _tensor(x, "broadcast")
    sending = rank(group) == src
    return _collective("broadcast", [(t, sending, not sending)], (x,), async_op,
                       lambda: dist.broadcast(t._torch(), src, group=group, async_op=async_op))


# -- one collective, through the runtime's bookkeeping ---------------------------------------

def _tensor(x, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, torch.Tensor):
        return from_torch(x)
    raise DistributedError(f"{what}: takes a tilesafe or torch tensor, got {type(x).__name__}", loc=caller_loc(),
                           help="pass a ts.Tensor or a torch.Tensor")


def _collective(what: str, accesses, outputs, async_op: bool, call) -> Future:
    """Check (S8, S13, S14), order (S9, S10), run `call`, register (S9, S12); see the module doc.
    `accesses`: (tensor, reads, writes)."""
    if not is_initialized():
        raise DistributedError(f"{what}: no torch.distributed process group is initialised", loc=caller_loc(),
                               help="call torch.distributed.init_process_group(...) first (torchrun sets it up)")
    capture = graph_var.get()
    for t, reads, writes in accesses:
        t._check_usable(what)
        t._check_not_lent_elsewhere(t._torch(), f"pass it to {what}")
        if writes and t._state.frozen:                 # S18: frozen bytes are never written again
            t._check_not_frozen(t._torch(), f"pass it to {what}")
        if reads:
            written = t._state.is_written(t._torch()) if capture is None else capture.is_written(t._state, t._torch())
            if not written:
                raise _unwritten(what)
    if capture is not None:
        return _captured(what, capture, accesses, outputs, async_op, call)
    device = accesses[0][0]._torch().device
    if device.type == "cuda":
        return _on_gpu(what, device, accesses, outputs, call)
    for t, _, writes in accesses:          # S9: after the pending work it conflicts with
        t._state.wait_for_host(t._byte_set(), write=writes, what=f"`{what}`")
    work = _call(what, call)
    _mark_written(accesses, None)
    if not async_op:
        return Future(outputs)
    done = _WorkDone(what, work, tuple(t._torch() for t, _, _ in accesses))
    for t, _, writes in accesses:
        t._state.record(t._byte_set(), writes, done)
    return Future(outputs, done)


def _on_gpu(what, device, accesses, outputs, call) -> Future:
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream()
        for t, _, writes in accesses:
            if t._state._pending:
                t._state.order_device(t._byte_set(), writes, stream.cuda_stream)
        work = _call(what, call)
        if work is not None:
            work.wait()                     # the current stream waits for NCCL's (the host does not)
        _mark_written(accesses, None)
        done = Completion(None, stream.cuda_stream, tuple(t._torch() for t, _, _ in accesses), stream)
        for t, _, writes in accesses:
            t._state.record(t._byte_set(), writes, done)
        return Future(outputs, done)


def _captured(what, capture, accesses, outputs, async_op, call) -> Future:
    if async_op:
        raise DistributedError(f"{what}: async_op=True is not allowed while capturing ts.graph()", loc=caller_loc(),
                               help="collectives in a capture are ordered by the graph: leave async_op False")
    if any(t._torch().device.type != "cuda" for t, _, _ in accesses):
        refuse_in_capture(f"{what} of a CPU tensor")
    _call(what, call)
    for t, _, writes in accesses:
        capture.record(t, writes)
    _mark_written(accesses, capture)
    return Future(outputs)


def _call(what: str, call):
    try:
        return call()
    except (RuntimeError, ValueError) as e:    # torch's DistBackendError, gloo's and NCCL's failures
        raise _failed(what, e) from None


def _mark_written(accesses, capture) -> None:
    for t, _, writes in accesses:
        if writes:
            if capture is None:
                t._state.mark_written(t._torch())
            else:
                capture.defer_written(t._state, t._torch())


class _WorkDone:
    """A CPU collective run by gloo's thread, as the pending-access registry sees it."""
    __slots__ = ("what", "work", "_keep", "_done")
    stream = None

    def __init__(self, what: str, work, keep):
        self.what, self.work, self._keep, self._done = what, work, keep, False

    def done(self) -> bool:
        if not self._done and self.work.is_completed():
            self.wait()
        return self._done

    def wait(self) -> None:
        if self._done:
            return
        try:
            self.work.wait()
        except (RuntimeError, ValueError) as e:
            raise _failed(self.what, e) from None
        finally:
            self._done, self._keep = True, ()


def _unwritten(what: str) -> Exception:
    from ..errors import OwnershipError
    return OwnershipError(f"{what} reads a tensor that came from ts.empty and has not been written",
                          loc=caller_loc(),
                          help="write it first (a launch or a host write), or create it with ts.zeros")


def _failed(what: str, e: Exception) -> DistributedError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return DistributedError(f"{what} failed: {first}", loc=caller_loc(),
                            help="another rank may have exited or timed out, or the ranks passed different shapes; "
                                 "every rank must call the same collectives in the same order")
