"""LayoutPlan.direct (runtime/launch_cache.py): once a layout has a GPU launcher for its
runtime scalars, a launch with new tensor and partition objects starts from the objects
themselves (no ArgFacts, no Bound). CPU stand-ins for the CUDA stream and Triton's launcher
(a launch records its argument tuple and starts nothing). Each refusal test warms a layout
up to its launcher, then launches the same layout with only a memory fact changed —
aliasing, lending, an ended partition, unwritten memory, a torch write to lent memory — and
expects the refusal a first launch makes: class, message, the line of the call, nothing
started. Pending work of another stream is ordered before a direct launch (S10).
Each test runs twice: after a warm-up that ends on the layout's third launch (the next launch
finds the layout by its key), and after one more launch that went direct (the next launch is
checked against that layout's facts on the objects themselves, `LayoutPlan.direct(keyed=True)`).
A loop of fresh launches leaves Python's garbage collector nothing to do."""
import collections

import numpy as np
import pytest
import torch

import tilesafe as ts
from gc_counts import young_growth
from runtime_helpers import assert_located, marker_line
from tilesafe.runtime import future, launch_cache
from tilesafe.runtime.prepared_launch import LayoutLauncher

HERE = __file__
UNPARTITIONED = "argument `z` of `plus_one` is a plain tensor, but an output (ts.Mut) needs a partition"


@ts.kernel
def plus_one(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)


class _Stream:
    device_index = None

    def __init__(self, waited):
        self.waited = waited

    def wait_event(self, event):
        self.waited.append(event)


@pytest.fixture(params=["by key", "after a direct launch"])
def gpu(monkeypatch, request):
    """Stand-ins: each layout's third launch makes a LayoutLauncher whose start records
    (stream, argument tuple) in `gpu.started`; completions count as done at once. `route`:
    whether `_warm` ends with a direct launch."""
    class Recorder:
        started, direct, waited = [], [], []
        route = request.param
    rec = Recorder()

    def layout_launcher(compiled, bound):
        names = tuple(bound.tensors)
        fill = lambda bound, views: tuple([views[n].data_ptr() for n in names])   # noqa: E731 (as Triton's: a list)
        launcher = LayoutLauncher(compiled, bound, lambda stream, args: rec.started.append((stream, args)), fill,
                                  torch.device("cuda", 0))
        real_direct = launcher._direct    # its written-out form: what both of `direct`'s callers run
        launcher._direct = lambda self, *a: (rec.direct.append(1), real_direct(self, *a))[1]
        return launcher
    monkeypatch.setattr(launch_cache, "prepare_layout", layout_launcher)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream(rec.waited))
    monkeypatch.setattr(future.HOLDING, "add", lambda completion: None)
    monkeypatch.setattr(future.Completion, "_known_done", lambda self: True)
    for k in (plus_one, times):
        k._layouts.forget()
        k._last_plan = None
    global _route
    _route = rec
    with ts.backend("reference"):
        yield rec
    plus_one._layouts.forget()
    plus_one._last_plan = None


def _values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-3, 3, n).astype(np.float32)


_route = None     # the `gpu` fixture's recorder: which warm-up this run takes


def _warm(n: int = 64) -> None:
    """Three launches of the layout (fresh objects): the third makes its launcher; then, on
    the second route, one that goes direct (what it recorded is forgotten)."""
    for seed in range(3):
        p = ts.zeros(n).partition((16,))
        plus_one(p, ts.tensor(_values(n, seed))).sync()
        p.unpartition()
    if _route.route == "after a direct launch":
        p = ts.zeros(n).partition((16,))
        plus_one(p, ts.tensor(_values(n, 3)))
        p.unpartition()
        assert _route.direct and _route.started
        _route.direct.clear()
        _route.started.clear()


def test_new_objects_of_a_layout_with_a_launcher_start_from_the_objects(gpu):
    _warm()
    for seed in range(3):
        z, x = torch.zeros(64), torch.from_numpy(_values(64, seed))
        p = ts.from_torch(z).partition((16,))
        fut = plus_one(p, ts.from_torch(x))
        assert fut.results() is p                                   # the output, as a launch returns it
        assert gpu.started[-1] == (7, (z.data_ptr(), x.data_ptr()))   # this launch's memory
        last = ts.from_torch(z)._state._pending[-1]
        assert last.is_write and last.future.stream == 7          # S9: pending on the launch's stream
        p.unpartition()
    assert len(gpu.direct) == 3 and len(gpu.started) == 3
    assert plus_one.last_launch.grid == (4,) and plus_one.last_launch.scalars == {"N": 64}
    assert plus_one._last_plan is None          # no same-arguments plan left for the next launch to try


def _alias_refused(gpu, p, x) -> None:
    """plus_one(p, x) with x overlapping p's memory is refused, located, and starts nothing."""
    started = len(gpu.started)
    with pytest.raises(ts.AliasError) as e:
        plus_one(p, x)  # alias-call
    assert e.value.message == "output `z` of `plus_one` shares memory with argument `x`"
    assert_located(e.value, HERE, "alias-call")
    assert len(gpu.started) == started
    p.unpartition()


def test_an_alias_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm()
    base = ts.tensor(_values(128, 1))
    p = base[0:64].partition((16,))
    plus_one(p, base[64:128])                                      # disjoint halves: direct
    p.unpartition()
    _alias_refused(gpu, base[0:64].partition((16,)), base[32:96])


def test_a_lent_ref_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm()
    x = ts.tensor(_values(64, 3))
    lent = x.partition((16,))  # lent-here
    p = ts.zeros(64).partition((16,))
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # lent-call
    assert e.value.message.startswith("cannot use `x`: this tensor is lent to a partition (lent at ")
    assert f"test_layout_direct.py:{marker_line(HERE, 'lent-here')}" in e.value.message
    assert_located(e.value, HERE, "lent-call")
    assert gpu.started == []
    lent.unpartition()
    plus_one(p, x)                                                 # given back: accepted, directly
    assert gpu.direct and gpu.started


def test_an_ended_partition_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm()
    p = ts.zeros(64).partition((16,))
    p.unpartition()  # ended-here
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, ts.tensor(_values(64, 5)))  # ended-call
    assert e.value.message == f"this partition was unpartitioned at {HERE}:{marker_line(HERE, 'ended-here')}"
    assert_located(e.value, HERE, "ended-call")
    assert gpu.started == []


def test_unwritten_memory_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm()
    x = ts.empty(64)                                               # same layout, never written
    p = ts.zeros(64).partition((16,))
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, x)  # unwritten-call
    assert e.value.message == ("argument `x` of `plus_one` is read, but it came from ts.empty and has not "
                               "been written")
    assert_located(e.value, HERE, "unwritten-call")
    assert gpu.started == []
    p.unpartition()


def test_a_torch_write_to_lent_memory_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm()
    z = torch.zeros(64)
    p = ts.from_torch(z).partition((16,))
    z.add_(1.0)                                                    # torch writes memory tilesafe holds
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, ts.tensor(_values(64, 7)))  # version-call
    assert "was modified through torch while tilesafe held it" in e.value.message
    assert_located(e.value, HERE, "version-call")
    assert gpu.started == []


def test_an_output_that_tracks_initialisation_takes_the_bound_path_and_is_marked(gpu):
    # ts.empty's memory keeps an init mask: its marks need the launch's bound, so the
    # direct form hands over before its launcher starts anything, and the bound path marks it written.
    _warm()
    z = ts.empty(64)
    p = z.partition((16,))
    plus_one(p, ts.tensor(_values(64, 8)))
    assert len(gpu.started) == 1 and not gpu.direct                # started once, by the bound path
    assert p.unpartition()._state.is_written(z._torch())


class _Pending:
    """A stand-in launch still running on raw stream `stream`."""
    def __init__(self, stream):
        self.stream = stream

    def done(self):
        return False

    def ready_event(self):
        return ("event of stream", self.stream)


@pytest.mark.parametrize("stream, waits", [(9, [("event of stream", 9)]), (7, [])])
def test_pending_work_of_another_stream_is_ordered_before_a_direct_launch(gpu, stream, waits):
    _warm()
    x = ts.tensor(_values(64, 9))
    x._state.record(x._byte_set(), True, _Pending(stream))         # a writer of x, still running
    p = ts.zeros(64).partition((16,))
    plus_one(p, x)
    assert gpu.direct and gpu.waited == waits
    p.unpartition()
    x._state._pending.clear()


@ts.kernel
def times(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], s: float, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s)


def test_a_launcher_serves_only_its_own_zero_and_not_the_other_sign(gpu):
    # -0.0 == 0.0 in Python, but the launcher's argument tuple holds the value it was made
    # for: a launch with -0.0 must not start the launcher of 0.0 (x * -0.0 is -0.0).
    x = ts.tensor(np.abs(_values(64, 11)) + 0.5)
    for _ in range(4):                                             # the third makes the launcher; the fourth uses it
        p = ts.zeros(64).partition((16,))
        times(p, x, 0.0)
        p.unpartition()
    assert len(gpu.started) == 1
    p = ts.full(64, np.nan).partition((16,))
    times(p, x, -0.0).sync()                                       # the reference backend runs it
    z = p.unpartition().numpy()
    assert len(gpu.started) == 1
    np.testing.assert_array_equal(np.signbit(z) & (z == 0), np.ones(64, bool))


def test_the_same_objects_again_after_a_direct_launch_take_the_prepared_path(gpu):
    """Objects launched twice in a row through the direct form are remembered as a LaunchPlan
    (compiled code first, then the bound: the order `checked` hands back was once passed
    swapped, and the next repeat failed with an AttributeError from our internals)."""
    _warm()
    x = ts.tensor(_values(64, 5))
    p = ts.zeros(64).partition((16,))
    for _ in range(4):
        plus_one(p, x).sync()
    assert plus_one._last_plan is not None and plus_one._last_plan.compiled is not plus_one._last_plan.bound
    p.unpartition()


def test_another_layout_after_a_direct_launch_is_launched_as_its_own(gpu):
    # Another length, then another 16-byte alignment class of the Ref: each is another layout
    # (looked up by key, checked in full, run by the reference backend); then the warmed layout
    # starts directly again.
    _warm()
    for n, off in ((32, 0), (64, 1)):
        base = torch.from_numpy(_values(n + off, 20 + n))
        x = ts.from_torch(base[off:])                              # off 1: 4 bytes past a 16-byte boundary
        p = ts.zeros(n).partition((16,))
        plus_one(p, x).sync()
        np.testing.assert_allclose(p.unpartition().numpy(), base[off:].numpy() + 1)
    assert gpu.started == []
    p = ts.zeros(64).partition((16,))
    plus_one(p, ts.tensor(_values(64, 30)))
    assert len(gpu.started) == 1 and gpu.direct
    p.unpartition()


def test_a_tensor_where_the_layout_had_a_partition_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm()
    with pytest.raises(ts.LaunchError) as e:
        plus_one(ts.zeros(64), ts.tensor(_values(64, 31)))  # unpartitioned-call
    assert e.value.message == UNPARTITIONED
    assert_located(e.value, HERE, "unpartitioned-call")
    assert gpu.started == []


def test_a_loop_of_fresh_launches_leaves_the_garbage_collector_nothing_to_do(gpu):
    # A tuple built from a generator or map() leaves Python's young-generation count one
    # higher. The direct path built one per launch (its same-objects test), so a loop of
    # launches ran the collector, full collections of a large heap among them (the H200: 12
    # of a fresh launch's 67 µs).
    _warm()
    gpu.started = collections.deque(maxlen=1)                     # the stand-in keeps no launch alive
    z, x = torch.zeros(64), torch.from_numpy(_values(64, 40))

    def fresh():
        p = ts.from_torch(z).partition((16,))
        plus_one(p, ts.from_torch(x))
        p.unpartition()
    for _ in range(5):
        fresh()
    grew = young_growth(fresh, 300)
    assert len(gpu.direct) == 305 and grew < 30                   # grew by 300 before


# -- torch tensors passed straight to the kernel --------------------------------------------

def _warm_torch(n: int = 64) -> torch.Tensor:
    """The layout with a torch Ref up to its launcher (three launches, new torch memory each:
    each first borrow takes the bound path), then, on the second route, one launch that goes
    direct. Returns memory seen before (its storage carries the state) for the tests' views."""
    for seed in range(3):
        p = ts.zeros(n).partition((16,))
        plus_one(p, torch.from_numpy(_values(n, seed))).sync()
        p.unpartition()
    x = torch.from_numpy(_values(n, 3))
    p = ts.zeros(n).partition((16,))
    plus_one(p, x)                                                 # new memory: borrowed by the bound path
    p.unpartition()
    if _route.route == "after a direct launch":
        p = ts.zeros(n).partition((16,))
        plus_one(p, x.view(n))
        p.unpartition()
        assert _route.direct
    _route.direct.clear()
    _route.started.clear()
    return x


def test_torch_views_of_memory_seen_before_start_directly(gpu):
    x = _warm_torch()
    for _ in range(3):
        z = torch.zeros(64)
        p = ts.from_torch(z).partition((16,))
        fut = plus_one(p, x.view(64))                              # a new torch object every launch
        assert fut.results() is p
        assert gpu.started[-1] == (7, (z.data_ptr(), x.data_ptr()))
        read = ts.from_torch(x)._state._pending[-1]
        assert not read.is_write and read.future.stream == 7       # S9: x's read is pending on the stream
        p.unpartition()
    assert len(gpu.direct) == 3
    plan = plus_one._last_plan                                     # no repeat plan holds a torch argument
    assert plan is None or not any(isinstance(a, torch.Tensor) for a in plan.args)


def test_a_torch_alias_of_the_output_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm_torch()
    base = torch.from_numpy(_values(128, 50))
    ts.from_torch(base)                                            # memory seen before
    p = ts.from_torch(base[0:64]).partition((16,))
    plus_one(p, base[64:128])                                      # disjoint: direct
    assert gpu.direct
    p.unpartition()
    _alias_refused(gpu, ts.from_torch(base[0:64]).partition((16,)), base[32:96])


def test_unwritten_memory_handed_to_torch_is_refused_as_a_first_launch_refuses_it(gpu):
    _warm_torch()
    t = ts.empty(64).to_torch()                                    # unwritten bytes, handed over (S14 kept)
    ts.from_torch(t)                                               # seen before
    p = ts.zeros(64).partition((16,))
    with pytest.raises(ts.OwnershipError) as e:
        plus_one(p, t.view(64))  # handed-call
    assert e.value.message == ("argument `x` of `plus_one` is read, but it came from ts.empty and has not "
                               "been written")
    assert_located(e.value, HERE, "handed-call")
    assert gpu.started == [] and not gpu.direct
    t.fill_(1.0)                                                   # torch wrote it: its bytes now
    plus_one(p, t.view(64))
    assert len(gpu.started) == 1
    p.unpartition()


def test_new_torch_memory_and_a_torch_subclass_take_the_bound_path(gpu):
    _warm_torch()
    p = ts.zeros(64).partition((16,))
    plus_one(p, torch.from_numpy(_values(64, 60)))                 # never seen: from_torch borrows it
    plus_one(p, torch.nn.Parameter(torch.from_numpy(_values(64, 61)), requires_grad=False))
    assert not gpu.direct and len(gpu.started) == 2                # both started by the bound path
    p.unpartition()


@pytest.mark.parametrize("stream, waits", [(9, [("event of stream", 9)]), (7, [])])
def test_pending_work_of_another_stream_is_ordered_before_a_direct_launch_of_a_torch_view(gpu, stream, waits):
    x = _warm_torch()
    state = ts.from_torch(x)._state
    state.record(ts.from_torch(x)._byte_set(), True, _Pending(stream))   # a writer of x's bytes, still running
    p = ts.zeros(64).partition((16,))
    plus_one(p, x.view(64))
    assert gpu.direct and gpu.waited == waits
    p.unpartition()
    state._pending.clear()
