"""A layout plan's same-objects test, written out for its roles (layout_unrolled.same_objects): whether a
launch passes the very objects of the layout's previous fast launch — tensors and partitions
the same live objects (held weakly: a new object at a dead one's address is another object),
other values by id — and it remembers them when not. Values of another kind or count than the
roles say take the loop, with the loop's answer."""
import types
import weakref

import torch

import tilesafe as ts
from tilesafe.runtime.layout_unrolled import _same_loop, same_objects


def _plan():
    return types.SimpleNamespace(last=None)


def test_the_same_objects_twice_are_repeated_new_ones_are_not():
    same = same_objects((True, True, False))
    plan = _plan()
    p, x, s = ts.zeros(8).partition((8,)), ts.zeros(8), 7
    assert same(plan, (p, x, s)) is False            # first seen: remembered
    assert same(plan, (p, x, s)) is True
    assert same(plan, (p, ts.zeros(8), s)) is False  # another tensor object
    assert same(plan, (p, x, s)) is False            # the one before it is remembered now
    assert same(plan, (p, x, 8)) is False            # another value
    p.unpartition()


def test_tensors_are_held_weakly_other_values_by_id():
    """A weak reference (not an id, which a new object at a dead one's address would share): a
    remembered tensor that died is the same as nothing, and the plan keeps nothing alive."""
    same = same_objects((True, False))
    plan = _plan()
    t, s = ts.from_torch(torch.zeros(4)), 3
    first = same(plan, (t, s))             # (not inside an assert: pytest would keep the tuple)
    assert first is False
    held, scalar = plan.last
    assert type(held) is weakref.ref and held() is t and scalar == id(s)
    del t
    assert held() is None                  # the plan did not keep it alive
    again = same(plan, (ts.from_torch(torch.zeros(4)), s))
    assert again is False


def test_other_kinds_and_counts_take_the_loop_with_its_answer():
    same = same_objects((True, False))
    plan, loop_plan = _plan(), _plan()
    x = ts.zeros(4)
    for values in ((x, 3), (5, 3), (5, 3), (x, 3), (x, 3), (x, 3, 4), (x, 3, 4), (x, 3)):
        assert same(plan, values) == _same_loop(loop_plan, values), values
