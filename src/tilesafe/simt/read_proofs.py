"""Which reads need no run-time check (as S11 for tile kernels).

`x[p]` or `x[p[0], p[1]]` is in bounds when `p` is a live permit of a walk over a target whose
extents on those axes have the same names (or the same ints) as `x`'s: the launch binds equal
names to equal extents, and the walk's guard keeps `p` inside its target. Shared arrays and
constant tables have static shapes, so an index whose static range fits (static_bounds.py), or
a permit of a walk over that same array, needs no check either.
"""
from __future__ import annotations

import ast

from .static_bounds import Span


def proven(ck, name, index, rank) -> bool:
    """In bounds by construction: a permit's coordinates on axes whose extents match by name,
    or (shared arrays) indices whose static range fits the static shape."""
    if (name in ck.info.shared or name in ck.info.tables) and \
            not (isinstance(index, ast.Name) and index.id in ck.live):
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        return all(_fits_static(ck, name, axis, item) for axis, item in enumerate(items))
    if isinstance(index, ast.Name) and index.id in ck.live:
        coords = [(ck.live[index.id], axis) for axis in range(rank)]
    else:
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        coords = []
        for item in items:
            if not (isinstance(item, ast.Subscript) and isinstance(item.value, ast.Name)
                    and item.value.id in ck.live and isinstance(item.slice, ast.Constant)):
                return False
            coords.append((ck.live[item.value.id], item.slice.value))
    return all(_same_extent(ck, name, axis, walk, walk_axis) for axis, (walk, walk_axis) in enumerate(coords))

def _fits_static(ck, name, axis, item) -> bool:
    extent = ck.info.tables[name].shape[axis] if name in ck.info.tables else ck.info.shared[name].shape[axis]
    if isinstance(item, ast.Subscript) and isinstance(item.value, ast.Name) and item.value.id in ck.live:
        walk = ck.live[item.value.id]
        return walk.target == name and isinstance(item.slice, ast.Constant) and item.slice.value == axis
    if isinstance(extent, str):        # sized by a simt.Const[int] (or a dynamic array's int) parameter
        return _counts_below(ck, item, extent)
    span = ck.bounds.range_of(item)    # an empty span (range(0)'s loop variable, unbound after it) proves nothing
    return isinstance(extent, int) and span is not None and 0 <= span[0] <= span[1] < extent

def _counts_below(ck, item, extent: str) -> bool:
    """`j` of `for j in range(n)` (or `range(a, n)`, a >= 0), bound by such loops alone and read inside
    one, where the axis has n elements: a parameter is never assigned in a kernel, so n is the extent
    the launch binds. After the loop j is unbound when n == 0 (numba reads element 0 of no elements)."""
    span = ck.bounds.sources.get(item.id) if isinstance(item, ast.Name) else None
    if not isinstance(span, Span) or not (isinstance(span.stop, ast.Name) and span.stop.id == extent):
        return False
    if not any(isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == item.id
               for _, node in ck.control):
        return False
    start = ck.bounds.range_of(span.start)
    return start is not None and start[0] >= 0

def _same_extent(ck, name, axis, walk, walk_axis) -> bool:
    mine = _extent_entry(ck, name, axis)
    theirs = _extent_entry(ck, walk.target, walk_axis)
    return mine is not None and mine == theirs

def _extent_entry(ck, name, axis):
    if name in ck.info.tables:
        return ck.info.tables[name].shape[axis]
    if name in ck.info.shared:
        entry = ck.info.shared[name].shape[axis]
    else:
        entry = ck.params[name].shape[axis]
    return None if entry == -1 else entry
