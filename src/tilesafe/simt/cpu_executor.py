"""The CPU executor: runs a SIMT kernel's threads block by block, with the sanitizer on.

It is the specification of the SIMT semantics, as the reference backend is for tile kernels:
small and obvious rather than fast. A block's threads are generators (interpret.py); the
scheduler advances every thread to its next synchronisation point, resolves warp operations
once all 32 lanes of a warp are there, and releases a barrier once every thread of the block
is there. The sanitizer checks every access: reads in bounds (a failed check is the error the
GPU reports at the next sync), outputs written only through this thread's live permits, no
element written by two threads, shared memory read only where written and never racing with
a write of the same phase.

Integers follow the GPU's arithmetic: numba computes with 64-bit ints (an int32 read is widened)
and a store into a narrower integer tensor keeps the low bits. So an integer element read here is
an int64, and an integer stored into an integer target wraps to its width (`hi << 16` into an
int32 word, `w & 0xFFFF0000`), where numpy's int32 scalars would wrap at every step or refuse a
wide constant.
"""
from __future__ import annotations

import numpy as np

from ..errors import KernelError, SanitizerError, TileSafeError
from . import mappings as M

_DONE = ("done",)


class Permit:
    """A write permit: one element of one target, for one thread, while its loop iteration lasts."""
    __slots__ = ("owner", "coords", "thread", "live")

    def __init__(self, owner, coords, thread):
        self.owner, self.coords, self.thread, self.live = owner, coords, thread, True

    def __getitem__(self, axis):
        return self.coords[axis]


class View:
    """A tensor argument or shared array as the executor sees it."""
    __slots__ = ("name", "array", "kind", "writer", "written", "phase", "int_bits")

    def __init__(self, name, array, kind):
        self.name, self.array, self.kind = name, array, kind
        self.int_bits = array.dtype.itemsize * 8 if array.dtype.kind in "iu" else 0
        self.writer = np.full(array.shape, -1, dtype=np.int64) if kind in ("disjoint", "shared") else None
        self.written = np.zeros(array.shape, dtype=bool) if kind == "shared" else None
        self.phase = np.full(array.shape, -1, dtype=np.int64) if kind == "shared" else None

    @property
    def shape(self):
        return self.array.shape


class Position:
    """Where a thread is: indices (x, y, z) as in CUDA."""
    __slots__ = ("tid", "bid", "bdim", "gdim")

    def __init__(self, tid, bid, bdim, gdim):
        self.tid, self.bid, self.bdim, self.gdim = tid, bid, bdim, gdim


class Block:
    __slots__ = ("shared", "phase", "bid")

    def __init__(self, bid):
        self.shared, self.phase, self.bid = {}, 0, bid


class Thread:
    """`__t` in the rewritten kernel: the thread's position and its checked accesses."""

    def __init__(self, pos: Position, flat: int, block: Block, run):
        self.pos, self.flat, self.block, self.run = pos, flat, block, run
        self.global_flat = (pos.bid[0] + pos.gdim[0] * (pos.bid[1] + pos.gdim[1] * pos.bid[2])) \
            * run.threads + flat

    # -- positions ----------------------------------------------------------------------------------
    def thread_id(self, axis=0):
        return self.pos.tid[axis]

    def block_id(self, axis=0):
        return self.pos.bid[axis]

    def block_dim(self, axis=0):
        return self.pos.bdim[axis]

    def grid_dim(self, axis=0):
        return self.pos.gdim[axis]

    def global_id(self):
        return self.pos.bid[0] * self.run.threads + self.flat

    def lane(self):
        return self.flat % 32

    def warp_id(self):
        return self.flat // 32

    # -- memory -------------------------------------------------------------------------------------
    def shared(self, shape, dtype, loc, name=None):
        key = (loc.line, loc.col)
        view = self.block.shared.get(key)
        if view is None:
            shape = shape if isinstance(shape, tuple) else (shape,)
            view = View(name or f"shared@{loc.line}", np.zeros(shape, dtype=dtype.np), "shared")
            self.block.shared[key] = view
        return view

    def permits(self, target, walk):
        shape = target.shape
        m = self.run.mapping(walk)
        pos = self.pos
        if target.kind == "shared":    # permits within the block
            pos = Position(pos.tid, (0, 0, 0), pos.bdim, (1, 1, 1))
        for coords in M.permits(m, shape, pos):
            permit = Permit(target, coords, self.global_flat)
            yield permit
            permit.live = False

    def write(self, target, permit, value, loc):
        if self.run.unsafe and not isinstance(permit, Permit) and target.kind == "disjoint":
            return self._raw_write(target, permit, value, loc)
        if not isinstance(permit, Permit) or permit.owner is not target or permit.thread != self.global_flat \
                or not permit.live:
            raise SanitizerError(f"write to `{target.name}` without a live permit of this thread", loc,
                                 help="write only through the permits of this thread's walk")
        c = permit.coords
        other = target.writer[c]
        if other != -1 and other != self.global_flat:
            raise SanitizerError(f"race: element {c} of `{target.name}` is written by threads {other} and "
                                 f"{self.global_flat}", loc, help="give each element one writer")
        target.writer[c] = self.global_flat
        target.array[c] = _stored(target, value)
        if target.kind == "shared":
            target.written[c] = True
            target.phase[c] = self.block.phase

    def _raw_write(self, target, index, value, loc):
        """An unsafe kernel's write at a computed index: in bounds, and no element written by two threads."""
        c, inside = self._coords(target, index, loc)
        if not inside:
            raise SanitizerError(f"out-of-bounds write to `{target.name}` at {c} (shape {target.array.shape})", loc,
                                 help="guard the index, or write through permits (which are always in bounds)")
        other = target.writer[c]
        if other != -1 and other != self.global_flat:
            raise SanitizerError(f"race: element {c} of `{target.name}` is written by threads {other} and "
                                 f"{self.global_flat}", loc,
                                 help="give each element one writer (permits do), or accumulate with out.add(i, v)")
        target.writer[c] = self.global_flat
        target.array[c] = _stored(target, value)

    def _coords(self, x, index, loc):
        coords = index.coords if isinstance(index, Permit) else index if isinstance(index, tuple) else (index,)
        for i in coords:        # int() would truncate a float index; numba-cuda refuses to compile one
            if not isinstance(i, (int, np.integer)):
                raise KernelError(f"index {i!r} of `{x.name}` is a {type(i).__name__}, not an int: numba-cuda "
                                  "refuses to compile a float index for the GPU", loc,
                                  help="index with ints: `//` divides ints, int(v) truncates a float")
        coords = tuple(int(i) for i in coords)
        inside = len(coords) == x.array.ndim and all(0 <= i < n for i, n in zip(coords, x.array.shape))
        return coords, inside

    def read(self, x, index, loc):
        coords, inside = self._coords(x, index, loc)
        if not inside:
            raise SanitizerError(f"out-of-bounds read of `{x.name}` at {coords} (shape {x.array.shape}): the "
                                 "check stops the kernel", loc,
                                 help=f"use {x.name}.get(i, default) where an index may fall outside")
        if x.kind == "shared":
            self._check_shared_read(x, coords, loc)
        return _loaded(x, x.array[coords])

    def read_run(self, x, index, k, loc):
        """x.run(i, k): x[i], ..., x[i + k - 1], each read checked."""
        return tuple(self.read(x, index + j, loc) for j in range(k))

    def _check_shared_read(self, x, coords, loc):
        if not x.written[coords]:
            raise SanitizerError(f"read of shared memory nobody wrote: `{x.name}` at {coords}", loc,
                                 help="read only elements some thread's permit wrote before the barrier")
        writer = x.writer[coords]
        if writer != self.global_flat and x.phase[coords] == self.block.phase:
            raise SanitizerError(f"race: `{x.name}` at {coords} is read in the phase thread {writer} writes it", loc,
                                 help="put simt.barrier() between the write and the read")

    def get(self, x, index, default, loc=None):
        coords, inside = self._coords(x, index, loc)
        if not inside:
            return default
        if x.kind == "shared":
            self._check_shared_read(x, coords, loc)
        return _loaded(x, x.array[coords])

    def atomic(self, h, op, index, value, loc):
        coords, inside = self._coords(h, index, loc)
        if not inside:
            raise SanitizerError(f"out-of-bounds atomic {op} on `{h.name}` at {coords} (shape {h.array.shape})",
                                 loc, help="guard the index before the atomic")
        if h.kind == "shared":
            if not h.written[coords]:
                raise SanitizerError(f"atomic {op} on shared memory nobody wrote: `{h.name}` at {coords}", loc,
                                     help="initialise the shared array through its permits, then simt.barrier()")
            if h.phase[coords] == self.block.phase and h.writer[coords] != self.global_flat:
                raise SanitizerError(f"race: `{h.name}` at {coords} is updated in the phase thread "
                                     f"{h.writer[coords]} writes it", loc,
                                     help="put simt.barrier() between the write and the atomic update")
        old = h.array[coords]
        h.array[coords] = old + value if op == "add" else max(old, value) if op == "max" else min(old, value)


def _loaded(view, value):
    """An element as the GPU's code computes with it: integers widened to 64 bits."""
    dt = view.array.dtype                   # a View, or a constant table (constant.py)
    return np.int64(value) if dt.kind in "iu" and dt.itemsize < 8 else value


def _stored(view, value):
    """What a store of `value` leaves in an integer target: its low bits (two's complement), as the
    GPU's store of a 64-bit int into a narrower element does."""
    bits = view.int_bits
    if not bits or isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return value
    v = int(value) & ((1 << bits) - 1)
    return v - (1 << bits) if view.array.dtype.kind == "i" and v >> (bits - 1) else v


def run_kernel(thread_fn, run, args) -> None:
    """Run every block of the launch in order; `run` knows the grid, block and mappings."""
    gx, gy, gz = run.grid
    for bz in range(gz):
        for by in range(gy):
            for bx in range(gx):
                _run_block(thread_fn, run, args, (bx, by, bz))


def _run_block(thread_fn, run, args, bid):
    bdx, bdy, bdz = run.block
    block = Block(bid)
    threads = []
    for tz in range(bdz):
        for ty in range(bdy):
            for tx in range(bdx):
                pos = Position((tx, ty, tz), bid, run.block, run.grid)
                threads.append(Thread(pos, len(threads), block, run))
    gens = [thread_fn(t, *args) for t in threads]
    _schedule(gens, block, run)


def _advance(gen, value, loc_of_error):
    try:
        return gen.send(value)
    except StopIteration:
        return _DONE
    except TileSafeError:
        raise
    except Exception as e:    # a Python error in the kernel's own code, at its line
        raise SanitizerError(f"the kernel raised {type(e).__name__}: {e}", _user_loc(e),
                             help="the kernel's own Python code failed at this line") from None


def _user_loc(e):
    import traceback
    from ..errors import Loc
    frames = traceback.extract_tb(e.__traceback__)
    return Loc(frames[-1].filename, frames[-1].lineno) if frames else None


def _schedule(gens, block, run):
    n = len(gens)
    state = [None] * n
    send = [None] * n
    runnable = list(range(n))
    while True:
        for i in runnable:
            state[i] = _advance(gens[i], send[i], None)
            send[i] = None
        runnable = _resolve_warps(state, send, n)
        if runnable:
            continue
        live = [i for i in range(n) if state[i] is not _DONE]
        if not live:
            return
        at_barrier = [i for i in live if state[i][0] == "barrier"]
        if len(at_barrier) == len(live) and len(live) == n:
            locs = {(state[i][1].line, state[i][1].col) for i in live}
            if len(locs) > 1:
                raise SanitizerError("threads of one block wait at different barriers", state[live[0]][1],
                                     help="every thread must reach the same barriers in the same order")
            block.phase += 1
            runnable = live
            continue
        waiting = state[live[0]]
        finished = [i for i in range(n) if state[i] is _DONE]
        why = f"thread {finished[0]} finished without reaching it" if finished else \
            "other threads of the block wait elsewhere"
        raise SanitizerError(f"a {'barrier' if waiting[0] == 'barrier' else 'warp operation'} is never reached by "
                             f"every thread it waits for: {why}", waiting[2] if waiting[0] == "warp" else waiting[1],
                             help="keep barriers and warp operations out of thread-dependent control flow")


def _resolve_warps(state, send, n):
    ready = []
    for w in range(0, n, 32):
        lanes = range(w, min(w + 32, n))
        events = [state[i] for i in lanes]
        if not all(e is not _DONE and e[0] == "warp" for e in events):
            continue
        ops = {(e[1], e[2].line, e[2].col) for e in events}
        if len(ops) > 1:
            raise SanitizerError("lanes of one warp are at different warp operations", events[0][2],
                                 help="keep warp operations out of thread-dependent control flow")
        op = events[0][1]
        values = [e[3] for e in events]
        extra = [e[4] if len(e) > 4 else None for e in events]
        for lane, i in enumerate(lanes):
            send[i] = _warp_result(op, values, extra[lane], lane, events[lane][2])
            ready.append(i)
    return ready


def _warp_result(op, values, arg, lane, loc):
    # PTX shfl.sync (what numba-cuda's shfl_down_sync / shfl_xor_sync lower to) reads only the low five
    # bits of its lane operand: shfl_down by d reads lane `lane + (d & 31)`, shfl_xor by m reads lane
    # `lane ^ (m & 31)`, and a source past lane 31 gives the caller its own value. (Seen on the H200:
    # a mask of -1 reverses the warp, as 31 does.) A negative delta is refused: it reads as a shift by
    # its low bits on the GPU, which is never what a program means.
    width = len(values)
    if op == "shfl_down":
        delta = int(arg)
        if not 0 <= delta < 1 << 31:
            raise SanitizerError(f"shfl_down by delta {delta}, outside 0 <= delta < 2**31", loc,
                                 help="shfl_down reads the lane `delta` above the caller's; shift by a delta >= 0")
        src = lane + (delta & 31)
        return values[src] if src < width else values[lane]
    if op == "shfl_xor":
        src = lane ^ (int(arg) & 31)
        return values[src] if src < width else values[lane]
    if op == "warp_sum":
        total = values[0]
        for v in values[1:]:
            total = total + v
        return total
    if op == "warp_max":
        return max(values)
    if op == "ballot":
        return sum(1 << i for i, v in enumerate(values) if v)
    raise AssertionError(op)
