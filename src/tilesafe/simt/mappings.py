"""Permit mappings: how a launch hands out the elements of an output (or shared array).

A mapping is a rule from a thread's position to the elements it may write. Each rule here
gives distinct threads distinct elements by construction, so two threads never hold permits
to the same element; `simt.at(expr)` takes a custom rule and the analysis accepts only the
injective ones. The grid of a launch is derived from its outputs' mappings (as tile kernels
derive it from partitions).

    per_thread()    one element per thread (rank 1-3; output axis -1 <-> block axis x)
    run(k)          k consecutive elements per thread (rank 1)
    chunk(k)        k elements per thread, strided by the block size within the block's slab; on a
                    rank-2 target (rank-2 block): a column of k elements, rows strided by block y
    grid_stride()   one permit per iteration of a grid-stride loop (any grid)
    per_warp(k)     a slab per warp: k elements (rank 1), or a row (rank 2); lanes stride by 32
    per_block(k)    a slab per block: k elements (rank 1), or a row (rank 2); threads stride
    at(g*k + c)     element g*k + c for global thread g (k >= 1, c >= 0 compile-time ints)
"""
from __future__ import annotations

from dataclasses import dataclass

THREAD, RUN, CHUNK, GRID_STRIDE, WARP, BLOCK, AT = "per_thread", "run", "chunk", "grid_stride", "per_warp", \
    "per_block", "at"
WITH_SIZE = (RUN, CHUNK, WARP, BLOCK)


@dataclass(frozen=True, slots=True)
class Mapping:
    kind: str
    size: int = 1      # run/chunk length, slab size (0: a row, for rank-2 slabs); `at`: the stride k
    offset: int = 0    # `at`: the offset c


def per_thread() -> Mapping:
    """One element per thread: `for p in out.permits(simt.per_thread()): out[p] = ...`."""
    return Mapping(THREAD)


def run(k: int) -> Mapping:
    """k consecutive elements per thread, one permit per element."""
    return Mapping(RUN, k)


def chunk(k: int) -> Mapping:
    """k elements per thread, strided by the block size (coalesced), one permit per element. On a
    rank-2 target with a rank-2 block (bx, by), block (i, j) covers a tile of bx columns and by*k
    rows, and thread (tx, ty) holds column tx, rows ty, ty + by, ..., ty + (k-1)*by of it."""
    return Mapping(CHUNK, k)


def grid_stride() -> Mapping:
    """One permit per iteration of a grid-stride loop: thread g gets g, g + G, g + 2G, ..."""
    return Mapping(GRID_STRIDE)


def per_warp(k: int = 0) -> Mapping:
    """A slab per warp: k elements of a rank-1 output, or one row of a rank-2 output (k = 0)."""
    return Mapping(WARP, k)


def per_block(k: int = 0) -> Mapping:
    """A slab per block: k elements of a rank-1 output, or one row of a rank-2 output (k = 0)."""
    return Mapping(BLOCK, k)


def at(index) -> Mapping:
    """Element `index` for each thread, where index is `simt.global_id() * k + c` (checked injective)."""
    raise TypeError("simt.at(...) is read by the kernel's analysis; it has no meaning outside a kernel")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def grid_of(m: Mapping, shape: tuple, block: tuple) -> tuple | None:
    """The grid whose threads hold exactly the permits covering `shape`; None: any grid."""
    threads = 1
    for b in block:
        threads *= b
    if m.kind == THREAD:
        axes = tuple(reversed(shape))   # grid x <-> the last axis
        return tuple(ceil_div(n, b) for n, b in zip(axes, block))
    n = shape[0]
    if m.kind == CHUNK and len(shape) == 2:
        return (ceil_div(shape[1], block[0]), ceil_div(n, block[1] * m.size))
    if m.kind in (RUN, CHUNK):
        return (ceil_div(n, threads * m.size),)
    if m.kind == GRID_STRIDE:
        return None
    if m.kind == WARP:
        warps = threads // 32
        return (ceil_div(n if m.size == 0 else ceil_div(n, m.size), warps),)
    if m.kind == BLOCK:
        return (n if m.size == 0 else ceil_div(n, m.size),)
    if m.kind == AT:
        return (ceil_div(ceil_div(max(n - m.offset, 0), m.size), threads),)
    raise AssertionError(m.kind)


def covers_all(m: Mapping) -> bool:
    """Whether the permits of a launch with the derived grid cover every element."""
    return m.kind != AT or (m.size == 1 and m.offset == 0)


def permits(m: Mapping, shape: tuple, pos) -> list:
    """The coordinates of the permits a thread holds, in order (the CPU executor's walk).

    `pos` has the thread's `tid`/`bid` (x, y, z tuples), `bdim`, `gdim` (tuples)."""
    tx, bx, bdx, gdx = pos.tid[0], pos.bid[0], pos.bdim[0], pos.gdim[0]
    threads = pos.bdim[0] * pos.bdim[1] * pos.bdim[2]
    flat_t = tx + bdx * (pos.tid[1] + pos.bdim[1] * pos.tid[2])
    if m.kind == THREAD:
        rank = len(shape)
        coord = tuple(pos.bid[ax] * pos.bdim[ax] + pos.tid[ax] for ax in range(rank))[::-1]
        return [coord] if all(c < n for c, n in zip(coord, shape)) else []
    n = shape[0]
    if m.kind == CHUNK and len(shape) == 2:     # rows strided by block y, one column per thread x
        col = bx * bdx + tx
        first = pos.bid[1] * pos.bdim[1] * m.size + pos.tid[1]
        rows = range(first, first + pos.bdim[1] * m.size, pos.bdim[1])
        return [(r, col) for r in rows if r < n and col < shape[1]]
    g = bx * threads + flat_t
    if m.kind == RUN:
        return [(i,) for i in range(g * m.size, g * m.size + m.size) if i < n]
    if m.kind == CHUNK:
        base = bx * threads * m.size
        return [(i,) for i in range(base + flat_t, base + threads * m.size, threads) if i < n]
    if m.kind == GRID_STRIDE:
        return [(i,) for i in range(g, n, gdx * threads)]
    if m.kind == AT:
        i = g * m.size + m.offset
        return [(i,)] if i < n else []
    if m.kind == WARP:
        w, lane = g // 32, flat_t % 32
        if m.size == 0:
            return [(w, j) for j in range(lane, shape[1], 32)] if w < n else []
        return [(i,) for i in range(w * m.size + lane, w * m.size + m.size, 32) if i < n]
    if m.kind == BLOCK:
        if m.size == 0:
            return [(bx, j) for j in range(flat_t, shape[1], threads)] if bx < n else []
        return [(i,) for i in range(bx * m.size + flat_t, bx * m.size + m.size, threads) if i < n]
    raise AssertionError(m.kind)
