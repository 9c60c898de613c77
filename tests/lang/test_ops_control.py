"""Control flow: range loops with dynamic bounds and carried values, while, if/else on
runtime scalars, compile-time branches and unrolled tuples, @ts.function helpers."""
import numpy as np
import pytest
from lang_helpers import launch, poisoned, rand

import tilesafe as ts


@ts.kernel
def first_rows_sum(z: ts.Mut[ts.f32, (1, "BN")], x: ts.Ref[ts.f32, ("M", "N")], n: int, BN: ts.Const[int],
                   M: int, N: int):
    px = x.partition((1, BN))
    acc = ts.zeros((1, BN), ts.f32)
    count = 0
    for k in range(n):                       # a runtime bound
        acc = acc + px.load((k, ts.block_id(1)))
        count = count + 1
    z.store(acc * 10.0 + count)


@pytest.mark.parametrize("n", [0, 1, 7, 19])
def test_range_with_runtime_bound_and_carried_values(backend, n):
    x = rand(np.random.default_rng(70), (19, 45), "f32")
    got = launch(first_rows_sum, ts.empty((1, 45)), (1, 16), ts.tensor(x), n)
    want = x[:n].astype(np.float64).sum(0, keepdims=True) * 10 + n
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@ts.kernel
def horner(z: ts.Mut[ts.f32, ("B",)], c: ts.Ref[ts.f32, ("K", "N")], lo: int, hi: int, B: ts.Const[int],
           K: int, N: int):
    pc = c.partition((1, B))
    acc = ts.zeros((1, B), ts.f32)
    for k in range(hi - 1, lo - 1, -1):      # backwards: the order matters
        acc = acc * 0.5 + pc.load((k, ts.block_id(0)))
    for k in range(lo, hi, 2):               # a static step
        acc = acc - pc.load((k, ts.block_id(0))) * 0.25
    z.store(ts.reshape(acc, (B,)))


@pytest.mark.parametrize("lo,hi", [(0, 9), (2, 7), (5, 5)])
def test_range_with_negative_and_static_steps(backend, lo, hi):
    c = rand(np.random.default_rng(71), (9, 40), "f32")
    got = launch(horner, ts.empty(40), (16,), ts.tensor(c), lo, hi)
    acc = np.zeros(40, np.float64)
    for k in range(hi - 1, lo - 1, -1):
        acc = acc * 0.5 + c[k]
    for k in range(lo, hi, 2):
        acc = acc - c[k] * 0.25
    np.testing.assert_allclose(got, acc, rtol=1e-5, atol=1e-5)


@ts.kernel
def nested(z: ts.Mut[ts.i32, ("B",)], n: int, m: int, B: ts.Const[int]):
    acc = ts.zeros((B,), ts.i32)
    for i in range(n):
        for j in range(i, m):
            acc = acc + (i * 100 + j)
    z.store(acc + ts.arange(0, B))


def test_nested_loops_with_dependent_bounds(backend):
    got = launch(nested, ts.empty(20, ts.i32), (32,), 4, 6)
    want = sum(i * 100 + j for i in range(4) for j in range(i, 6))
    assert np.array_equal(got, want + np.arange(20))


@ts.kernel
def halve_until(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], limit: float, B: ts.Const[int], N: int):
    t = ts.load_tile_like(x, z)
    steps = 0
    while ts.scalar(ts.max(ts.abs(t))) > limit:   # a runtime condition on a carried tile
        t = t * 0.5
        steps = steps + 1
    z.store(t + ts.astype(steps, ts.f32) * 1000.0)


def test_while_with_carried_tile_and_counter(backend):
    rng = np.random.default_rng(72)
    x = rand(rng, 70, "f32", -1, 1) * np.array([1, 10, 100])[np.arange(70) % 3 * 0 + (np.arange(70) // 32) % 3]
    x = x.astype(np.float32)
    got = launch(halve_until, ts.empty(70), (32,), ts.tensor(x), 3.0)
    want = np.empty(70)
    for b in range(3):
        t = x[b * 32:(b + 1) * 32].astype(np.float64)
        steps = 0
        while np.abs(t).max() > 3.0:
            t, steps = t * 0.5, steps + 1
        want[b * 32:(b + 1) * 32] = t + steps * 1000
    np.testing.assert_allclose(got, want, rtol=1e-6)


@ts.kernel
def collatz_steps(z: ts.Mut[ts.i32, (1,)], start: ts.Ref[ts.i64, ("N",)], N: int):
    v = ts.scalar(ts.load(start, (ts.block_id(0),), shape=(1,)))
    n = 0
    while v != 1:
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        n = n + 1
    z.store(ts.full((1,), n, ts.i32))


def test_while_with_if_inside(backend):
    starts = np.array([1, 6, 7, 27, 97], np.int64)
    got = launch(collatz_steps, ts.empty(5, ts.i32), (1,), ts.tensor(starts))

    def steps(v):
        n = 0
        while v != 1:
            v, n = (v // 2 if v % 2 == 0 else 3 * v + 1), n + 1
        return n
    assert got.tolist() == [steps(int(s)) for s in starts]


@ts.kernel
def branchy(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], flag: int, scale: float, B: ts.Const[int],
            N: int):
    t = ts.load_tile_like(x, z)
    if flag > 0:
        t = t * scale
        u = 1.0
    else:
        t = t - scale
        u = 2.0
    if flag == 2:                           # no else: t is carried through
        t = ts.abs(t)
    z.store(t + u + (3.0 if flag < 0 else 0.0))


@pytest.mark.parametrize("flag", [-1, 0, 1, 2])
def test_if_else_on_runtime_scalars(backend, flag):
    x = rand(np.random.default_rng(73), 50, "f32")
    got = launch(branchy, ts.empty(50), (16,), ts.tensor(x), flag, 1.5)
    x64 = x.astype(np.float64)
    t, u = (x64 * 1.5, 1.0) if flag > 0 else (x64 - 1.5, 2.0)
    if flag == 2:
        t = np.abs(t)
    np.testing.assert_allclose(got, t + u + (3.0 if flag < 0 else 0.0), rtol=1e-6)


@ts.kernel
def alternate(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("K", "N")], B: ts.Const[int], K: int, N: int):
    px = x.partition((1, B))
    acc = ts.zeros((1, B), ts.f32)
    for k in range(ts.num_tiles(px, 0)):
        if k % 2 == 0:                      # a branch on the loop variable
            acc = acc + px.load((k, ts.block_id(0)))
        else:
            acc = acc - px.load((k, ts.block_id(0)))
    z.store(acc.reshape(B))


def test_if_inside_loop_on_loop_variable(backend):
    x = rand(np.random.default_rng(74), (7, 33), "f32")
    got = launch(alternate, ts.empty(33), (16,), ts.tensor(x))
    sign = np.where(np.arange(7) % 2 == 0, 1.0, -1.0)[:, None]
    np.testing.assert_allclose(got, (x * sign).sum(0), rtol=1e-5, atol=1e-5)


@ts.kernel
def maybe_store(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], which: int, B: ts.Const[int], N: int):
    if ts.block_id(0) == which:              # only one block writes
        z.store(ts.load_tile_like(x, z))


def test_store_under_runtime_if_writes_only_that_block(backend):
    x = rand(np.random.default_rng(75), 40, "f32")
    z, poison = poisoned(40, "f32", 999.0)
    got = launch(maybe_store, z, (16,), ts.tensor(x), 1)
    assert np.array_equal(got[16:32], x[16:32])
    assert np.array_equal(got[:16], poison[:16]) and np.array_equal(got[32:], poison[32:])


@ts.kernel
def static_choices(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], MODE: ts.Const[int], B: ts.Const[int],
                   N: int):
    t = ts.load_tile_like(x, z)
    if MODE == 0:                           # compile time: only the taken branch is lowered
        r = t * 2.0
    elif MODE == 1:
        r = ts.exp(t)
    else:
        r = t.astype(ts.f16)                # would not type-check as the f32 result
    for c in (1.0, 2.0, 3.0):               # unrolled
        r = r + c
    z.store(r)


@pytest.mark.parametrize("mode", [0, 1])
def test_compile_time_branch_and_unrolled_tuple(backend, mode):
    x = rand(np.random.default_rng(76), 40, "f32")
    got = launch(static_choices, ts.empty(40), (16,), ts.tensor(x), MODE=mode)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, (x64 * 2 if mode == 0 else np.exp(x64)) + 6.0, rtol=1e-5)


# --- @ts.function helpers ---------------------------------------------------------------
@ts.function
def gelu(t, approximate=False):
    if approximate:
        r = 0.5 * t * (1.0 + ts.tanh(0.7978845608 * (t + 0.044715 * t * t * t)))
    else:
        r = 0.5 * t * (1.0 + ts.erf(t * 0.7071067811865476))
    return r


@ts.function
def gelu_and_square(t):
    return gelu(t), gelu(t, approximate=True), t * t


@ts.kernel
def activations(z: ts.Mut[ts.f32, ("B", 4)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    t = ts.load(x, (ts.block_id(0),), shape=(B,))
    a, b, c = gelu_and_square(t)
    z.store(ts.reshape(ts.join(ts.join(a, b), ts.join(c, t)), (B, 4)))


def test_function_helpers_inline_nested_with_defaults_and_tuples(backend):
    from math import erf
    x = rand(np.random.default_rng(77), 50, "f32")
    got = launch(activations, ts.empty((50, 4)), (16, 4), ts.tensor(x))
    x64 = x.astype(np.float64)
    exact = 0.5 * x64 * (1 + np.vectorize(erf)(x64 / np.sqrt(2)))
    approx = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    # join(join(a, b), join(c, t)) is (B, 2, 2) with [i, k, 0] = (a, b)[k], [i, k, 1] = (c, t)[k]
    want = np.stack([exact, x64 * x64, approx, x64], axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@ts.kernel
def block_arith(z: ts.Mut[ts.i32, (2, 4)], W: ts.Const[int]):
    i, j = ts.block_id(0), ts.block_id(1)
    n0, n1 = ts.num_blocks(0), ts.num_blocks(1)
    lin = i * n1 + j
    z.store(ts.full((2, 4), lin * 1000 + n0 * 10 + n1 + min(i, W) * 0 + max(j, 0) * 0, ts.i32))


def test_block_id_num_blocks_and_scalar_arithmetic(backend):
    got = launch(block_arith, ts.empty((5, 9), ts.i32), (2, 4), W=3)
    gi, gj = np.meshgrid(np.arange(5) // 2, np.arange(9) // 4, indexing="ij")
    assert np.array_equal(got, (gi * 3 + gj) * 1000 + 3 * 10 + 3)


def test_device_function_keeps_its_name_and_doc():
    @ts.function
    def twice(t):
        """Double a tile."""
        return t * 2.0

    assert twice.__name__ == "twice" and twice.__doc__ == "Double a tile."
    with pytest.raises(ts.KernelError, match="`twice` is a @ts.function"):
        twice(1.0)
