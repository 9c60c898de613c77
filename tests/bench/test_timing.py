"""How measurements are taken: rotation set sizing, graph-or-eager, launches per graph,
sample counts, and `measure` / `measure_side_by_side` driving a fake clock."""
import pytest

from fakes import FakeTimer
from tilesafe.bench.timing import EAGER, GRAPH, Policy, choose_mode, launches_per_graph, measure, \
    measure_side_by_side, rotation_sets, samples_for

MB = 1_000_000


@pytest.mark.parametrize("set_bytes, sets", [
    (1536 * 2 ** 20, 1),          # 512 MiB x 3 operands: one set is already >= 180 MB
    (180 * MB, 1),
    (179 * MB, 2),
    (21 * MB, 9),                 # a Qwen3-4B o_proj weight: 9 distinct weights
    (1, 256),                     # capped
])
def test_rotation_sets_cover_three_times_the_l2(set_bytes, sets):
    assert rotation_sets(set_bytes) == sets


def test_rotation_uses_three_l2_when_that_is_larger_than_180_mb():
    policy = Policy(l2_bytes=100 * MB)
    assert rotation_sets(30 * MB, policy) == 10
    assert rotation_sets(30 * MB, policy) * 30 * MB >= 3 * policy.l2_bytes


def test_kernels_under_50_us_are_timed_in_a_graph():
    assert choose_mode(49.9) == GRAPH
    assert choose_mode(50.0) == EAGER
    assert choose_mode(5000.0) == EAGER
    assert choose_mode(80.0, Policy(graph_below_us=100.0)) == GRAPH


@pytest.mark.parametrize("n_sets, us", [(1, 5.0), (9, 5.0), (7, 40.0), (64, 1.0), (300, 1.0)])
def test_a_graph_is_whole_passes_over_the_sets(n_sets, us):
    per = launches_per_graph(n_sets, us)
    assert per % n_sets == 0 and per >= n_sets
    assert per <= max(Policy().max_per_graph, n_sets) + n_sets
    if n_sets == 1:
        assert per == 400                      # 2 ms of 5 us launches


def test_sample_counts_are_bounded():
    p = Policy()
    assert samples_for(1.0) == p.max_samples
    assert samples_for(100_000.0) == p.min_samples
    assert samples_for(10_000.0) == 20        # 200 ms of 10 ms launches


def test_a_long_kernel_is_timed_eagerly_over_the_rotated_sets():
    timer = FakeTimer(us=400.0)
    seen = []
    m = measure(timer, seen.append, n_sets=3, capture="tilesafe")
    assert m.mode == EAGER and m.median_us == 400.0 and m.launches_per_sample == 1
    assert timer.calls == [("eager", Policy().probe), ("eager", samples_for(400.0))]
    assert seen[:7] == [0, 1, 2, 0, 1, 0, 1]   # probe i%3, then the samples from 0 again


def test_a_short_kernel_is_timed_in_a_graph_with_its_capture_kind():
    timer = FakeTimer(us=5.0)
    seen = []
    m = measure(timer, seen.append, n_sets=9, capture="tilesafe")
    per = launches_per_graph(9, 5.0)
    assert m.mode == GRAPH and m.launches_per_sample == per
    assert timer.calls[1] == ("graph", per, samples_for(5.0 * per), "tilesafe")
    assert sorted(set(seen)) == list(range(9))  # every set is used


def test_a_graph_that_cannot_be_captured_falls_back_to_eager_with_a_note():
    m = measure(FakeTimer(us=5.0, graph_fails=True), lambda i: None, n_sets=2, capture="torch")
    assert m.mode == EAGER and "graph capture failed" in m.note and "capturing" in m.note
    assert m.to_json()["note"] == m.note


def test_side_by_side_samples_take_turns_in_rounds():
    timer = FakeTimer(us=400.0)
    order = []
    launches = {"tilesafe": (lambda i: order.append("ts"), 2, "tilesafe"),
                "twin": (lambda i: order.append("twin"), 2, "torch")}
    got = measure_side_by_side(timer, launches, rounds=4)
    n = samples_for(400.0)
    assert set(got) == {"tilesafe", "twin"}
    assert all(m.mode == EAGER and len(m.samples_us) == n and m.median_us == 400.0 for m in got.values())
    probes = Policy().probe
    assert timer.calls[:2] == [("eager", probes), ("eager", probes)]
    slices = timer.calls[2:]
    assert len(slices) == 8 and sum(c[1] for c in slices[0::2]) == n == sum(c[1] for c in slices[1::2])
    runs = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k]   # who sampled when
    # probes, then 4 rounds, each led by the next one: ts twin | ts twin | twin ts | ts twin | twin ts
    assert runs == ["ts", "twin", "ts", "twin", "ts", "twin", "ts"]           # (repeats merge into one run)


def test_side_by_side_rounds_take_turns_leading():
    timer = FakeTimer(us=400.0)
    order = []
    launches = {k: ((lambda k: lambda i: order.append(k))(k), 1, "torch") for k in ("a", "b", "c")}
    measure_side_by_side(timer, launches, rounds=3)
    runs = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k]
    assert runs == ["a", "b", "c"] + ["a", "b", "c", "b", "c", "a", "c", "a", "b"]   # probes, then 3 rounds
    order.clear()
    measure_side_by_side(FakeTimer(us=400.0), launches, rounds=4)   # 4 rounds for 3: 6, each leads twice
    runs = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k][3:]
    assert runs == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_side_by_side_records_a_failure_and_times_the_rest():
    def boom(i):
        raise RuntimeError("no kernel image")
    got = measure_side_by_side(FakeTimer(us=5.0, graph_fails=True),
                               {"a": (boom, 1, "torch"), "b": (lambda i: None, 1, "torch")})
    assert isinstance(got["a"], RuntimeError)
    assert got["b"].mode == EAGER and "graph capture failed" in got["b"].note
    assert len(got["b"].samples_us) == samples_for(5.0)                 # one launch a sample, as eager timing


class PerImplTimer(FakeTimer):
    """A fake clock where each implementation (named by the launch it runs) has its own time."""

    def __init__(self, us: dict):
        super().__init__()
        self.per, self.current = us, None

    def eager(self, launch, reps):
        launch(0)
        return [self.per[self.current]] * reps

    def graph(self, launch, per_graph, reps, capture):
        launch(0)
        return [self.per[self.current]] * reps


def test_side_by_side_times_every_implementation_in_the_mode_of_the_fastest():
    """A 49 us kernel beside a 51 us one: both in a graph (an eager one would also pay the
    launch gaps the graph hides, and the ratio would compare modes, not kernels)."""
    timer = PerImplTimer({"ours": 51.0, "twin": 49.0})
    launches = {k: ((lambda k: lambda i: setattr(timer, "current", k))(k), 4, "torch") for k in ("ours", "twin")}
    got = measure_side_by_side(timer, launches)
    assert got["ours"].mode == got["twin"].mode == GRAPH
    assert got["ours"].launches_per_sample == launches_per_graph(4, 51.0)
    timer = PerImplTimer({"ours": 51.0, "twin": 60.0})
    got = measure_side_by_side(timer, launches)
    assert got["ours"].mode == got["twin"].mode == EAGER
