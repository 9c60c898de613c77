"""Bounds conditions compiled to Python functions give what walking them gives, and what
exact integer arithmetic gives (an oracle written here), with the unknown values a grid of
any size brings: inf, and NaN from inf // n or a division by zero, with which every
comparison is false."""
import math
import random

import pytest

from tilesafe.lang.conditions import compile_condition, evaluate


class Facts:
    def __init__(self, extents, scalars, grid):
        self.extents, self.scalars, self.grid_ = extents, scalars, grid

    def extent(self, name, axis):
        return self.extents[(name, axis)]

    def scalar(self, name):
        return self.scalars[name]

    def grid(self, axis):
        return self.grid_[axis]


def oracle(e, f):
    """Exact arithmetic, written independently of tilesafe (NaN: unknown)."""
    tag = e[0]
    if tag == "const":
        return e[1]
    if tag in ("extent", "scalar", "grid"):
        return {"extent": lambda: f.extents[(e[1], e[2])], "scalar": lambda: f.scalars[e[1]],
                "grid": lambda: f.grid_[e[1]]}[tag]()
    a = oracle(e[1], f)
    if tag == "and":
        return bool(a) and bool(oracle(e[2], f))
    b = oracle(e[2], f)
    if math.isnan(a) or math.isnan(b):
        return False if tag in ("le", "ge") else math.nan
    if tag in ("floordiv", "cdiv"):
        if b == 0 or math.isinf(a) or math.isinf(b):
            return math.nan
        return a // b if tag == "floordiv" else -((-a) // b)              # ints: exact
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b),
            "le": a <= b, "ge": a >= b}[tag]


def random_expr(rng, depth):
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([("const", rng.choice([0, 1, -1, 3, 16, 2 ** 31 - 1, -2 ** 31, 2 ** 40])),
                           ("scalar", "s"), ("extent", "x", 0), ("grid", 0)])
    tag = rng.choice(["add", "sub", "mul", "floordiv", "cdiv", "min", "max"])
    return (tag, random_expr(rng, depth - 1), random_expr(rng, depth - 1))


def random_condition(rng, depth):
    if depth > 0 and rng.random() < 0.3:
        return ("and", random_condition(rng, depth - 1), random_condition(rng, depth - 1))
    return (rng.choice(["le", "ge"]), random_expr(rng, depth), random_expr(rng, depth))


FACTS = [Facts({("x", 0): n}, {"s": s}, (g,)) for n in (0, 64, 70) for s in (0, 5, -3, 2 ** 31 - 1)
         for g in (1, 4, math.inf)]


@pytest.mark.parametrize("seed", range(40))
def test_compiled_condition_equals_the_walk_and_the_oracle(seed):
    rng = random.Random(seed)
    for _ in range(10):
        cond = random_condition(rng, 3)
        fn = compile_condition(cond)
        for f in FACTS:
            want = oracle(cond, f)
            assert evaluate(cond, f) == want, (cond, vars(f))
            assert fn(f) == want, (cond, vars(f))


def test_unknown_values_fail_every_comparison():
    f = FACTS[2]                                               # grid of any size: inf
    assert f.grid(0) == math.inf
    half = ("floordiv", ("grid", 0), ("const", 2))             # inf // 2: unknown
    for cond in [("le", half, ("const", 10)), ("ge", half, ("const", 0)),
                 ("le", ("min", half, ("const", 3)), ("const", 10)),
                 ("ge", ("floordiv", ("const", 5), ("sub", ("scalar", "s"), ("scalar", "s"))), ("const", 0))]:
        assert evaluate(cond, f) is False and compile_condition(cond)(f) is False


def test_and_stops_at_its_first_false_operand():
    class Counting(Facts):
        asked = 0

        def scalar(self, name):
            Counting.asked += 1
            return super().scalar(name)

    cond = ("and", ("le", ("const", 1), ("const", 0)), ("ge", ("scalar", "s"), ("const", 0)))
    f = Counting({}, {"s": 1}, (1,))
    assert evaluate(cond, f) is False and Counting.asked == 0
