"""Hypothesis strategies for the kernel fuzzer: programs, shapes, strided views, scalars.

A `Case` is everything one launch needs besides the backend: the program, the output view
(inside a bigger poisoned buffer, or a fresh `ts.empty` for the S14 checks), the input
views (inside bigger buffers whose other elements hold a sentinel, so a read past a view
shows in the result) and the scalar values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from kernel_gen import COMPARES, Program

TILES = (1, 2, 4, 8)
MAX_GRID = 8                   # Triton's interpreter runs each program for a few ms
COEFS = (1.0, 2.0, -0.5)       # powers of two: a product is exact, so an FMA rounds the same
PADDINGS = (0.0, 0.0, -1.5)
DIVISORS = (1, 2, 3, 4, 7)     # positive: floor division by zero or by -1 is not what this fuzzes


def scalar_values(tiles=(4,)):
    """0, ±1, ±2, the i32 and i64 boundaries, 2**30, tile counts whose element offset is near
    ±2**31 or wraps 32 bits to a small number, small and large random values."""
    boundaries = [0, 1, -1, 2, -2, 2**30, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**32, 2**31 - 2]
    tile_counts = sorted({sign * (2**bits // t) + d for t in tiles for bits in (31, 32) for sign in (1, -1)
                          for d in (-1, 0, 1)})
    return st.one_of(st.sampled_from(boundaries), st.sampled_from(tile_counts), st.integers(-40, 40),
                     st.integers(-2**40, 2**40))


@dataclass(frozen=True)
class View:
    """base[slices] (then .T when `transposed`): a strided view of a bigger buffer."""
    base_shape: tuple[int, ...]
    slices: tuple[tuple[int, int, int], ...]     # (start, stop, step) per base axis
    transposed: bool

    def of(self, base):
        v = base[tuple(slice(*s) for s in self.slices)]
        return v.T if self.transposed else v


@dataclass(frozen=True)
class Case:
    program: Program
    out_shape: tuple[int, ...]
    out_view: View | None          # None: the output is a fresh ts.empty (S14)
    in_views: tuple[View, ...]
    scalars: tuple[int, ...]
    seed: int
    shared: bool = False           # x0 is another view of the output's buffer (S7: refused if they meet)

    def views_meet(self) -> bool:
        """Do the output view and x0 share an element of the one buffer?"""
        if not self.shared:
            return False
        marks = np.zeros(self.out_view.base_shape, np.int8)
        self.out_view.of(marks)[...] += 1
        self.in_views[0].of(marks)[...] += 1
        return bool((marks == 2).any())


@st.composite
def views(draw, shape):
    rank = len(shape)
    transposed = rank == 2 and draw(st.booleans())
    pre = shape[::-1] if transposed else shape
    slices, base = [], []
    for n in pre:
        start, step = draw(st.integers(0, 2)), draw(st.sampled_from((1, 1, 2, 3)))
        stop = start + (n - 1) * step + 1
        slices.append((start, stop, step))
        base.append(stop + draw(st.integers(0, 2)))
    return View(tuple(base), tuple(slices), transposed)


class _Ctx:
    def __init__(self, rank, n_inputs, n_scalars, in_loop=False, reads_output=True):
        self.rank, self.n_inputs, self.n_scalars, self.in_loop = rank, n_inputs, n_scalars, in_loop
        self.reads_output = reads_output          # z.load() allowed (not for a ts.empty output)

    def looped(self):
        return _Ctx(self.rank, self.n_inputs, self.n_scalars, True, self.reads_output)


def int_exprs(draw, ctx: _Ctx, depth: int):
    if depth == 0 or draw(st.booleans()):
        atoms = ["bid", "s", "s", "c", "nt"] + (["k", "k"] if ctx.in_loop else [])
        kind = draw(st.sampled_from(atoms))
        if kind == "bid":
            return ("bid", draw(st.integers(0, ctx.rank - 1)))
        if kind == "s":
            return ("s", draw(st.integers(0, ctx.n_scalars - 1)))
        if kind == "c":
            return ("c", draw(st.integers(-3, 5)))
        if kind == "nt":
            return ("nt", draw(st.integers(0, ctx.n_inputs - 1)), draw(st.integers(0, ctx.rank - 1)))
        return ("k",)
    op = draw(st.sampled_from(("+", "-", "*", "//", "%", "min", "max")))
    a = int_exprs(draw, ctx, depth - 1)
    if op in ("//", "%"):
        return ("op", op, a, ("c", draw(st.sampled_from(DIVISORS))))
    b = int_exprs(draw, ctx, depth - 1)
    return (op, a, b) if op in ("min", "max") else ("op", op, a, b)


def terms(draw, ctx: _Ctx):
    kind = draw(st.sampled_from(("load", "load", "view", "like") + (("own",) if ctx.reads_output else ())))
    if kind == "own":
        return ("own",)
    i = draw(st.integers(0, ctx.n_inputs - 1))
    padding = draw(st.sampled_from(PADDINGS))
    if kind == "like":
        return ("like", i, padding)
    index = tuple(int_exprs(draw, ctx, 2) for _ in range(ctx.rank))
    return (kind, i, index, padding)


def statements(draw, ctx: _Ctx, depth: int):
    kinds = ["acc", "acc", "acc", "store"] + (["if"] if depth > 0 else []) + \
            (["loop"] if depth > 0 and not ctx.in_loop else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "acc":
        return ("acc", terms(draw, ctx), draw(st.sampled_from(COEFS)))
    if kind == "store":
        return ("store", draw(st.sampled_from(COEFS)))
    if kind == "loop":
        inner = ctx.looped()
        bound = ("static", draw(st.integers(0, 3))) if draw(st.booleans()) else ("dyn", int_exprs(draw, ctx, 1))
        body = tuple(statements(draw, inner, depth - 1) for _ in range(draw(st.integers(1, 2))))
        return ("loop", bound, body)
    cond = (draw(st.sampled_from(COMPARES)), int_exprs(draw, ctx, 2), int_exprs(draw, ctx, 1))
    then = tuple(statements(draw, ctx, depth - 1) for _ in range(draw(st.integers(0, 2))))
    other = tuple(statements(draw, ctx, depth - 1) for _ in range(draw(st.integers(0, 2))))
    return ("if", cond, then, other)


@st.composite
def views_within(draw, base_shape):
    """A strided view of a buffer of `base_shape` (to share it with another view)."""
    transposed = len(base_shape) == 2 and draw(st.booleans())
    slices = []
    for n in base_shape:
        start, step = draw(st.integers(0, n - 1)), draw(st.sampled_from((1, 2, 3)))
        count = draw(st.integers(1, (n - 1 - start) // step + 1))
        slices.append((start, start + (count - 1) * step + 1, step))
    return View(tuple(base_shape), tuple(slices), transposed)


def _fit_tile(shape, tile):
    """Grow the tile until the grid has at most MAX_GRID blocks."""
    tile = list(tile)
    while np.prod([-(-n // t) for n, t in zip(shape, tile)]) > MAX_GRID:
        a = max(range(len(tile)), key=lambda i: -(-shape[i] // tile[i]))
        tile[a] *= 2
    return tuple(tile)


@st.composite
def cases(draw, allow_empty_output: bool = True):
    rank = draw(st.integers(1, 2))
    out_shape = tuple(draw(st.integers(1, 12)) for _ in range(rank))
    tile = _fit_tile(out_shape, tuple(draw(st.sampled_from(TILES)) for _ in range(rank)))
    n_inputs, n_scalars = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    empty = allow_empty_output and draw(st.integers(0, 4)) == 0
    ctx = _Ctx(rank, n_inputs, n_scalars, reads_output=not empty)
    if draw(st.integers(0, 3)) == 0:      # one load and a store: the plainest index forms, often
        body = (("acc", terms(draw, ctx), 1.0), ("store", 1.0))
    else:
        body = tuple(statements(draw, ctx, 2) for _ in range(draw(st.integers(1, 4))))
        if draw(st.integers(0, 4)) > 0:
            body += (("store", 1.0),)      # most kernels end by storing; some store only conditionally
    program = Program(tile, n_inputs, n_scalars, body)
    in_shapes = [tuple(draw(st.integers(1, 14)) for _ in range(rank)) for _ in range(n_inputs)]
    in_views = tuple(draw(views(s)) for s in in_shapes)
    out_view = None if empty else draw(views(out_shape))
    shared = not empty and draw(st.integers(0, 3)) == 0
    if shared:                             # x0 in the output's buffer: disjoint is fine, meeting is S7
        in_views = (draw(views_within(out_view.base_shape)),) + in_views[1:]
    scalars = tuple(draw(scalar_values(tile)) for _ in range(n_scalars))
    return Case(program, out_shape, out_view, in_views, scalars, draw(st.integers(0, 2**32 - 1)), shared)
