"""A call plan's fast form (call_hits.CallHit) written out for one plan, for its common case.

CallHit.__call__ walks the plan's roots and steps with loops and branches on facts the plan
key fixes: how many tensors the call passes and that each is a torch tensor, which roots it
allocates and how, which steps are launches with a fast form. For a plan whose arguments are
all torch tensors and whose allocations are torch's new bytes (call_hits' `news`), the same
steps are written out once as straight code with those facts as constants. It does the
common case only — each torch argument's memory known, tracking no initialisation and holding
the view (S13 as `from_torch`'s unlocked common case borrows it), each tilesafe tensor (a
caller's `workspace=`) neither handed over nor lent — and hands any other call,
before it has done anything, to CallHit's own loops (`_walk`), which borrow, refuse or
allocate as before. What it does on the common case is what those loops do, in their order:
borrow, allocate (or take the kept workspace, the device's scratch), the storages-apart test (S7), each launch's
fast form or its full step, the result.
"""
from __future__ import annotations

import math

import torch

from ..runtime.host_lock import LOCK
from ..runtime.spec import dense_strides
from ..runtime.storage_state import STATE_ATTR, StorageState
from ..runtime.tensor import Tensor
from . import call_recording as R
from . import scratch


def unrolled(hit, places: list):
    """`call(hit, places)` for CallHit `hit` (made with the tensors of `places`), or None where
    its plan is not of that common case."""
    plan = hit.plan
    n = len(places)
    if any(not isinstance(place[4], torch.Tensor) and type(place[4]) is not Tensor for place in places):
        return None
    mine = [i for i, place in enumerate(places) if type(place[4]) is Tensor]   # a workspace's, a Tensor argument
    allocated = list(enumerate(plan.roots[n:], n))
    if any(kind != R.SCRATCH and (kind != R.EMPTY or i not in hit.news) for i, (kind, _) in allocated):
        return None                       # ts.empty's tracked memory
    returned = plan.returned
    if not (type(returned) is int or hit.flat):
        return None
    ns = {"__name__": __name__,   # tilesafe's code: error locations skip its frames (errors.caller_loc)
          "LOCK": LOCK, "STATE_ATTR": STATE_ATTR, "torch_empty_strided": torch.empty_strided,
          "attach_new": StorageState.attach_new,
          "KEPT": hit.kept, "LAUNCHES": hit.launches, "SCRATCH_BUFFERS": scratch.buffers}
    src = ["def call(hit, places):",
           "    with LOCK:"]
    body = []
    unpack = ", ".join(f"(tv{i}, st{i}, sp{i}, p{i}, t{i})" for i in range(n))
    body.append(f"{unpack}, = places")
    for i in range(n):
        if i in mine:
            # A tilesafe tensor: its own state, unless handed over or lent since call_key read it
            # (another thread): then the loops refuse it as the full path's first read would.
            body += [f"if t{i}._handed_at is not None or (t{i}._lender is not None and t{i}._lender() is not None):",
                     "    return hit._walk(places)",
                     f"s{i} = t{i}._state",
                     f"n{i} = st{i}.nbytes()"]
            continue
        # S13 as from_torch's common case: a known state tracking no initialisation, holding the view
        body += [f"s{i} = getattr(st{i}, STATE_ATTR, None)",
                 f"n{i} = st{i}.nbytes()",
                 f"if s{i} is None or s{i}.init_mask is not None or p{i} - sp{i} + {int(hit.extents[i])} > n{i}:",
                 "    return hit._walk(places)"]
    roots = [f"(tv{i}, s{i}, p{i}, sp{i}, n{i})" for i in range(n)]
    states = [f"s{i}" for i in range(n)]
    for i, (kind, recipe) in allocated:   # (torch's new bytes; a returned one is torch-mode: CallHit.news)
        if kind == R.SCRATCH:
            # The device's scratch (split-K partials, a long row's statistics): its root made
            # once per buffer (CallHit.scratch_root) and taken again while this thread's buffer
            # for the device is that one (a larger call may have replaced it: then made anew).
            ns[f"SEEN{i}"], ns[f"SDEV{i}"] = hit.seen, recipe
            # (None: this thread has no buffer yet, and a dead reference is None too)
            body += [f"w{i} = SEEN{i}.get({i})",
                     f"b{i} = SCRATCH_BUFFERS().get(SDEV{i})",
                     f"if w{i} is None or b{i} is None or w{i}[0]() is not b{i}:",
                     f"    w{i} = hit.scratch_root({i})",
                     f"r{i} = w{i}[1]"]
            roots.append(f"r{i}")
            states.append(f"r{i}[1]")
            continue
        shape, dtype, device = hit.news[i]
        # torch.empty_strided with the layout's size and strides: torch's cheapest call for a
        # known dense layout (no overload choice between torch.empty's forms; CPU: ~1.7 µs
        # against torch.empty's ~2.5). A dense layout's storage holds exactly its elements,
        # so its bytes are the layout's too (a constant).
        ns[f"SHAPE{i}"], ns[f"STRIDE{i}"] = tuple(shape), dense_strides(shape)
        ns[f"DTYPE{i}"], ns[f"DEVICE{i}"] = dtype, device
        nbytes = _nbytes(shape, dtype)
        make = ["try:",
                f"    t{i} = torch_empty_strided(SHAPE{i}, STRIDE{i}, dtype=DTYPE{i}, device=DEVICE{i})",
                "except RuntimeError:",
                "    return hit._walk(places)     # (it refuses with ts.empty's error: too large)",
                f"p{i} = t{i}.data_ptr()",
                f"r{i} = (t{i}, attach_new(t{i}.untyped_storage(), {nbytes}, p{i}), p{i}, p{i}, {nbytes})"]
        if i in hit.internal:             # a workspace of the call's own launches, kept (call_hits)
            body += [f"r{i} = KEPT.get({i})",
                     f"if r{i} is None:"] + ["    " + line for line in make] + [f"    KEPT[{i}] = r{i}"]
        else:
            body += make
        roots.append(f"r{i}")
        states.append(f"r{i}[1]")
    body.append(f"roots = [{', '.join(roots)}]")
    ids = ", ".join(f"id({s}.__dict__)" for s in states)
    # Not apart (S7): every step with the whole-call checks, and then the result as below.
    made = ["None"] * len(plan.roots)
    for i in mine:
        made[i] = f"t{i}"                 # a step's full path uses the tensor itself (as _walk's `made`)
    body += [f"made = [{', '.join(made)}]",
             f"if len({{{ids}}}) != {hit.groups}:",
             "    hit._steps(roots, made, False)",
             "else:"]
    for k, step in enumerate(plan.steps):
        if type(step) is tuple:
            continue                      # a whole-call check: apart, it holds (call_hits._steps)
        if hit.launches[k] is not None:
            body += [f"    if not LAUNCHES[{k}].run(roots):",
                     f"        hit._full_step({k}, roots, made)"]
        else:
            body.append(f"    hit._full_step({k}, roots, made)")
    if body[-1] == "else:":
        body.append("    pass")                # (no launch: CallHit.of makes no hit then)
    if type(returned) is int:
        body.append(f"return t{returned}")
    else:
        body.append(f"return ({''.join(f't{r}, ' for r in returned)})")
    src += ["        " + line for line in body]
    exec(compile("\n".join(src), f"<call plan hit of {_name(plan)}>", "exec"), ns)  # noqa: S102
    return ns["call"]


def _nbytes(shape, dtype) -> int:
    """Bytes of a dense tensor of `shape` and torch `dtype` (its storage's, as torch allocates it)."""
    return math.prod(int(d) for d in shape) * dtype.itemsize


def _name(plan) -> str:
    for step in plan.steps:
        if type(step) is not tuple:
            return step.kernel.name
    return "checks"
