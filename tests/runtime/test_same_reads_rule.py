"""Which arguments of a planned launch its written-out GPU form checks, orders and registers as
one (planned_unrolled._same_reads): only reads of the very same bytes — one root, one offset,
one alignment class, one S14 role, and the same shape and strides or one dense run of the same
length. A write, another offset, role or alignment class, or bytes that overlap but differ
(a longer run, a strided view of the same span) keep their own checks and registration."""
import types

import pytest

from tilesafe.runtime.planned_unrolled import _same_reads


def _plan(*args):
    """A planned launch's facts per argument: (root, byte offset, shape, byte strides, item
    size, alignment class, written, read by S14)."""
    root, off, shape, strides, item, align, write, read = zip(*args)
    return types.SimpleNamespace(slots=root, offsets=off, shapes=shape, byte_strides=strides, items=item,
                                 aligns=align, writes=write, reads=tuple(k for k, r in enumerate(read) if r))


ROW = (0, 0, (1, 64), (128, 2), 2, 0, False, True)       # x's row, (1, 64) 2-byte items
BIAS = (0, 0, (64,), (2,), 2, 0, False, True)            # the same bytes as (64,)


def test_the_same_bytes_read_twice_are_one():
    assert _same_reads(_plan(ROW, ROW)) == {1: 0}
    assert _same_reads(_plan(ROW, BIAS)) == {1: 0}                        # one dense run, other shape
    assert _same_reads(_plan(ROW, (0, 0, (32,), (4,), 4, 0, False, True))) == {1: 0}   # as 4-byte items
    strided = (0, 0, (4, 8), (64, 2), 2, 0, False, True)                  # not dense: by shape and strides
    assert _same_reads(_plan(strided, ROW, strided)) == {2: 0}


@pytest.mark.parametrize("other, why", [
    ((0, 0, (1, 64), (128, 2), 2, 0, True, False), "a write of the same bytes"),
    ((1, 0, (1, 64), (128, 2), 2, 0, False, True), "another root"),
    ((0, 2, (1, 64), (128, 2), 2, 0, False, True), "another offset (overlapping)"),
    ((0, 0, (1, 64), (128, 2), 2, 8, False, True), "another alignment class"),
    ((0, 0, (1, 64), (128, 2), 2, 0, False, False), "another S14 role"),
    ((0, 0, (65,), (2,), 2, 0, False, True), "a longer run over the same start"),
    ((0, 0, (32,), (4,), 2, 0, False, True), "every other item of a span as long"),
    ((0, 0, (0, 64), (128, 2), 2, 0, False, True), "an empty view"),
])
def test_reads_of_other_bytes_or_roles_stay_apart(other, why):
    assert _same_reads(_plan(ROW, other)) == {}, why
    assert _same_reads(_plan(other, ROW)) == {}, why
