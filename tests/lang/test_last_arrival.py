"""S16: `if ts.last_arrival():`, the last block of a group combines the group's tiles.

Positive runs on the CPU backends against NumPy (outputs poisoned first, counters back at
zero after every launch); negative tests per rule (class, message, marked line); the sm_90
code the Triton backend generates for the ticket."""
import numpy as np
import pytest
from lang_helpers import assert_diagnostic, poisoned, rand

import tilesafe as ts

HERE = __file__


@ts.kernel
def split_rows(c: ts.MutLast[ts.f32, ("B",)], part: ts.Mut[ts.f32, (1, "B")], x: ts.Ref[ts.f32, (-1, -1)],
               B: ts.Const[int]):
    """c = 2 * x.sum(0): block (s, j) doubles row s's tile j; the last of column j sums them."""
    px = x.partition((1, B))
    s, j = ts.block_id(0), ts.block_id(1)
    part.store(px.load((s, j)) * 2.0)
    if ts.last_arrival():
        acc = ts.zeros((B,), ts.f32)
        for m in part.members():
            acc = acc + ts.reshape(part.load(m), (B,))
        c.store(acc)


@ts.kernel
def split_matrix(c: ts.MutLast[ts.f32, ("BM", "BN")], lo: ts.Mut[ts.f32, (1, "BM", "BN")],
                 hi: ts.Mut[ts.f32, (1, "BM", "BN")], x: ts.Ref[ts.f32, (-1, -1, -1)], BM: ts.Const[int],
                 BN: ts.Const[int]):
    """A rank-3 grid, two partial outputs: c = max over s of x[s] - min over s of x[s]."""
    px = x.partition((1, BM, BN))
    t = px.load((ts.block_id(0), ts.block_id(1), ts.block_id(2)))
    lo.store(t)
    hi.store(t)
    if ts.last_arrival():
        a = ts.full((BM, BN), float("inf"), ts.f32)
        b = ts.full((BM, BN), float("-inf"), ts.f32)
        for m in lo.members():
            a = ts.minimum(a, ts.reshape(lo.load(m), (BM, BN)))
        for m in hi.members():
            b = ts.maximum(b, ts.reshape(hi.load(m), (BM, BN)))
        c.store(b - a)


@ts.kernel
def total(c: ts.MutLast[ts.f32, (1,)], part: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, (-1,)], B: ts.Const[int]):
    """A rank-1 grid is one group: every block's partial sums into one number."""
    part.store(ts.load_tile_like(x, part))
    if ts.last_arrival():
        acc = ts.zeros((1,), ts.f32)
        for m in part.members():
            acc = acc + ts.sum(part.load(m))
        c.store(acc)


def _counters_at_rest():
    from tilesafe.runtime import arrivals
    for buf in arrivals._BUFFERS.values():
        assert not buf.numpy().any(), "a launch left a ticket counter nonzero"


@pytest.mark.parametrize("s,n,b", [(5, 300, 64), (1, 64, 64), (7, 33, 16)])
def test_last_block_of_each_column_sums_the_rows(backend, s, n, b):
    rng = np.random.default_rng(s * n)
    x = rand(rng, (s, n), "f32")
    c, _ = poisoned((n,), "f32")
    part = ts.empty((s, n), ts.f32)
    for _ in range(2):                        # twice: the first launch left the counters at zero
        pc, pp = c.partition((b,)), part.partition((1, b))
        split_rows(pc, pp, ts.tensor(x)).sync()
        pc.unpartition(), pp.unpartition()
        np.testing.assert_allclose(c.numpy(), 2 * x.sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5)
        _counters_at_rest()


def test_rank_three_grid_with_two_partial_outputs(backend):
    rng = np.random.default_rng(3)
    x = rand(rng, (4, 40, 24), "f32")
    c, _ = poisoned((40, 24), "f32")
    lo, hi = ts.empty((4, 40, 24), ts.f32), ts.empty((4, 40, 24), ts.f32)
    pc, pl, ph = c.partition((16, 8)), lo.partition((1, 16, 8)), hi.partition((1, 16, 8))
    split_matrix(pc, pl, ph, ts.tensor(x)).sync()
    for p in (pc, pl, ph):
        p.unpartition()
    np.testing.assert_array_equal(c.numpy(), x.max(0) - x.min(0))
    _counters_at_rest()


def test_rank_one_grid_is_one_group(backend):
    x = rand(np.random.default_rng(1), (1000,), "f32")
    c = ts.empty((1,), ts.f32)                 # never written before: the launch initialises it (S14)
    part = ts.empty((1000,), ts.f32)
    pc, pp = c.partition((1,)), part.partition((128,))
    total(pc, pp, ts.tensor(x)).sync()
    pc.unpartition(), pp.unpartition()
    np.testing.assert_allclose(c.numpy(), [x.sum(dtype=np.float64)], rtol=1e-5)


def test_the_sanitizer_sees_no_race_in_the_group_reads():
    x = rand(np.random.default_rng(2), (6, 100), "f32")
    c, part = ts.empty((100,), ts.f32), ts.empty((6, 100), ts.f32)
    with ts.backend("reference"):
        k = ts.kernel(split_rows.__wrapped__, sanitize=True)
        pc, pp = c.partition((32,)), part.partition((1, 32))
        k(pc, pp, ts.tensor(x)).sync()
        pc.unpartition(), pp.unpartition()
    np.testing.assert_allclose(c.numpy(), 2 * x.sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_ir_shows_the_ticket_and_the_group_accesses():
    ir = split_rows.ir(ts.spec((64,), ts.f32, tile=(32,)), ts.spec((3, 64), ts.f32, tile=(1, 32)),
                       ts.spec((3, 64), ts.f32))
    assert "arrive()" in ir and "mode='member'" in ir and "mode='group'" in ir


# --- launch rule (S5 for MutLast) -----------------------------------------------------------
def test_group_output_partition_must_have_one_tile_per_group():
    c, part = ts.zeros((128,), ts.f32), ts.empty((3, 64), ts.f32)
    pc, pp = c.partition((32,)), part.partition((1, 32))     # 4 tiles, but 2 groups
    with pytest.raises(ts.LaunchError) as ei:
        split_rows(pc, pp, ts.zeros((3, 64), ts.f32))
    assert "its partition's grid must be the launch grid (3, 2) without axis 0, (2,); it is (4,)" in ei.value.message
    assert ei.value.loc is not None and ei.value.loc.file == HERE
    assert not pc.unpartition().numpy().any()   # a refused launch writes nothing


def test_group_output_must_be_a_partition():
    part = ts.empty((3, 64), ts.f32)
    pp = part.partition((1, 32))
    with pytest.raises(ts.LaunchError, match=r"an output \(ts.MutLast\) needs a partition"):
        split_rows(ts.zeros((64,), ts.f32), pp, ts.zeros((3, 64), ts.f32))


def test_group_output_cannot_be_a_prefix_partition():
    c, part = ts.zeros((64,), ts.f32), ts.empty((3, 64), ts.f32)
    pc, pp = c.partition_prefix((32,)), part.partition((1, 32))
    with pytest.raises(ts.LaunchError, match="a partition_prefix"):
        split_rows(pc, pp, ts.zeros((3, 64), ts.f32))


# --- definition rules (S16) -------------------------------------------------------------------
def test_last_arrival_inside_a_loop():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            for i in range(2):
                if ts.last_arrival():  # E:in-loop
                    c.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:in-loop", "must be the condition of an `if` at the top level")


def test_last_arrival_in_a_helper_function():
    @ts.function
    def finish(c):
        if ts.last_arrival():  # E:in-helper
            c.store(ts.zeros((16,), ts.f32))

    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            finish(c)
    assert_diagnostic(ei.value, HERE, "E:in-helper", "at the top level of the kernel body")


def test_last_arrival_must_be_the_last_statement():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)], q: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():  # E:not-last
                c.store(ts.zeros((16,), ts.f32))
            q.store(ts.zeros((1, 16), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:not-last", "must be the kernel's last statement")


def test_last_arrival_takes_no_else():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():
                c.store(ts.zeros((16,), ts.f32))
            else:
                c.store(ts.full((16,), 1.0, ts.f32))  # E:else
    assert_diagnostic(ei.value, HERE, "E:else", "takes no else branch")


def test_last_arrival_used_as_a_value():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(p: ts.Mut[ts.f32, (1, 16)]):
            last = ts.last_arrival()  # E:as-value
            p.store(ts.zeros((1, 16), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:as-value", "only the condition of an if")


def test_last_arrival_takes_no_arguments():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival(p):  # E:args
                c.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:args", "takes no arguments")


def test_members_outside_the_last_arrival_body():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(p: ts.Mut[ts.f32, (1, 16)], q: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            acc = ts.zeros((1, 16), ts.f32)
            for m in p.members():  # E:members-outside
                acc = acc + p.load(m)
            q.store(acc)
    assert_diagnostic(ei.value, HERE, "E:members-outside", "only inside `if ts.last_arrival():`")


@ts.kernel
def split_rows_branching(c: ts.MutLast[ts.f32, ("B",)], part: ts.Mut[ts.f32, (1, "B")], x: ts.Ref[ts.f32, (-1, -1)],
                         B: ts.Const[int], cut: int):
    """c = x.sum(0) with rows below `cut` doubled: `part` is stored on both branches of an if."""
    px = x.partition((1, B))
    s, j = ts.block_id(0), ts.block_id(1)
    if s < cut:
        part.store(px.load((s, j)) * 2.0)
    else:
        part.store(px.load((s, j)))
    if ts.last_arrival():
        acc = ts.zeros((B,), ts.f32)
        for m in part.members():
            acc = acc + ts.reshape(part.load(m), (B,))
        c.store(acc)


@ts.kernel
def split_rows_in_halves(c: ts.MutLast[ts.f32, ("B",)], part: ts.Mut[ts.f32, (1, "B")], x: ts.Ref[ts.f32, (-1, -1)],
                         B: ts.Const[int]):
    """c = 3 * x.sum(0): `part` is stored in a loop that surely runs (a static range)."""
    px = x.partition((1, B))
    for k in range(2):
        part.store(px.load((ts.block_id(0), ts.block_id(1))) * (1.0 + k))
    if ts.last_arrival():
        acc = ts.zeros((B,), ts.f32)
        for m in part.members():
            acc = acc + ts.reshape(part.load(m), (B,))
        c.store(acc * 1.5)


@pytest.mark.parametrize("cut", [0, 2, 9])
def test_members_stored_on_both_branches_of_an_if_are_read_by_the_last_block(backend, cut):
    """Every path stores the block's whole tile (not only a top-level store, as before): the
    written-output analysis says so, and the tiles are final when the ticket is taken."""
    rng = np.random.default_rng(cut)
    x = rand(rng, (5, 40), "f32")
    c, _ = poisoned((40,), "f32")
    part = ts.empty((5, 40), ts.f32)
    pc, pp = c.partition((16,)), part.partition((1, 16))
    split_rows_branching(pc, pp, ts.tensor(x), cut=cut).sync()
    pc.unpartition(), pp.unpartition()
    want = (x.astype(np.float64) * np.where(np.arange(5) < cut, 2.0, 1.0)[:, None]).sum(0)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-5, atol=1e-5)
    _counters_at_rest()


def test_members_stored_in_a_static_loop_are_read_by_the_last_block(backend):
    x = rand(np.random.default_rng(4), (3, 40), "f32")
    c, _ = poisoned((40,), "f32")
    part = ts.empty((3, 40), ts.f32)
    pc, pp = c.partition((16,)), part.partition((1, 16))
    split_rows_in_halves(pc, pp, ts.tensor(x)).sync()
    pc.unpartition(), pp.unpartition()
    np.testing.assert_allclose(c.numpy(), 3 * x.sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5)
    _counters_at_rest()


def test_group_read_of_an_output_stored_in_a_dynamic_loop():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)], n: int):
            for i in range(n):                  # may run zero times
                p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():
                acc = ts.zeros((1, 16), ts.f32)
                for m in p.members():  # E:dynamic-loop
                    acc = acc + p.load(m)
                c.store(ts.reshape(acc, (16,)))
    assert_diagnostic(ei.value, HERE, "E:dynamic-loop", "every block must first store its whole tile of `p`")


def test_group_read_of_a_conditionally_stored_output():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)], n: int):
            if ts.block_id(0) < n:
                p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():
                acc = ts.zeros((1, 16), ts.f32)
                for m in p.members():  # E:unstored
                    acc = acc + p.load(m)
                c.store(ts.reshape(acc, (16,)))
    assert_diagnostic(ei.value, HERE, "E:unstored", "every block must first store its whole tile of `p`")


def test_mut_store_inside_the_last_arrival_body():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():
                p.store(ts.full((1, 16), 1.0, ts.f32))  # E:mut-in-body
                c.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:mut-in-body", "cannot store to the ts.Mut output `p` inside")


def test_group_output_stored_outside_the_body():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            c.store(ts.zeros((16,), ts.f32))  # E:group-outside
            if ts.last_arrival():
                c.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:group-outside", "`c` is a ts.MutLast output: store it inside")


def test_group_output_without_last_arrival():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)],  # E:no-arrival
              p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:no-arrival", "`c` is a ts.MutLast output, but the kernel has no")


def test_group_output_needs_a_mut_output():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)],  # E:no-mut
              x: ts.Ref[ts.f32, (-1,)]):
            if ts.last_arrival():
                c.store(ts.zeros((16,), ts.f32))
    assert_diagnostic(ei.value, HERE, "E:no-mut", "needs a ts.Mut output beside it")


def test_member_index_reads_another_output_only_if_it_is_final():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)], q: ts.Mut[ts.f32, (1, 16)], n: int):
            p.store(ts.zeros((1, 16), ts.f32))
            if ts.block_id(0) < n:
                q.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():
                acc = ts.zeros((1, 16), ts.f32)
                for m in p.members():
                    acc = acc + q.load(m)  # E:other-members
                c.store(ts.reshape(acc, (16,)))
    assert_diagnostic(ei.value, HERE, "E:other-members", "every block must first store its whole tile of `q`")


@ts.kernel
def weighted(c: ts.MutLast[ts.f32, ("B",)], val: ts.Mut[ts.f32, (1, "B")], wt: ts.Mut[ts.f32, (1, "B")],
             x: ts.Ref[ts.f32, (-1, -1)], B: ts.Const[int]):
    """One members() walk reads two outputs: c = sum over s of x[s] * (s + 1)."""
    px = x.partition((1, B))
    s, j = ts.block_id(0), ts.block_id(1)
    val.store(px.load((s, j)))
    wt.store(ts.full((1, B), 1.0, ts.f32) * (s + 1).astype(ts.f32))
    if ts.last_arrival():
        acc = ts.zeros((1, B), ts.f32)
        for m in val.members():
            acc = acc + val.load(m) * wt.load(m)
        c.store(ts.reshape(acc, (B,)))


def test_one_member_index_reads_every_final_output(backend):
    x = rand(np.random.default_rng(4), (3, 50), "f32")
    c, _ = poisoned((50,), "f32")
    val, wt = ts.empty((3, 50), ts.f32), ts.empty((3, 50), ts.f32)
    parts = c.partition((16,)), val.partition((1, 16)), wt.partition((1, 16))
    weighted(*parts, ts.tensor(x)).sync()
    for p in parts:
        p.unpartition()
    np.testing.assert_allclose(c.numpy(), (x * np.arange(1, 4)[:, None]).sum(0), rtol=1e-5, atol=1e-5)


def test_group_output_is_not_read_back():
    with pytest.raises(ts.KernelError) as ei:
        @ts.kernel
        def k(c: ts.MutLast[ts.f32, (16,)], p: ts.Mut[ts.f32, (1, 16)]):
            p.store(ts.zeros((1, 16), ts.f32))
            if ts.last_arrival():
                c.store(ts.zeros((16,), ts.f32))
                t = c.load()  # E:read-back
    assert_diagnostic(ei.value, HERE, "E:read-back", "is not read back")


# --- the generated code for a GPU ---------------------------------------------------------------
def test_sm90_code_takes_an_acquire_release_ticket_and_reads_members_from_l2():
    pytest.importorskip("triton")
    from tilesafe.runtime.compile_ahead import compile_ahead
    k = compile_ahead(split_rows, ts.spec((4096,), ts.f32, tile=(64,)), ts.spec((8, 4096), ts.f32, tile=(1, 64)),
                      ts.spec((8, 4096), ts.f32), arch=90)
    lines = [line.strip() for line in k.asm["ptx"].splitlines()]
    atoms = [line for line in lines if line.startswith("@") and " atom." in line]
    assert len(atoms) == 1 and "atom.global.gpu.acq_rel.add" in atoms[0], atoms   # one ticket, by one thread
    first = lines.index(next(line for line in lines if " atom." in line))
    assert any(line.startswith("bar.sync") for line in lines[:first]), "no barrier before the ticket"
    assert any(line.startswith("ld.global.cg") for line in lines[first:]), "member tiles not read from L2"
