"""Autotuning: `@ts.autotune` configs, `tile=ts.auto` launches, the per-shape-class cache,
the tuned files (committed and user cache), lending of the auto-partitioned output, and the
errors. Every test runs on the CPU backends; timing is a fake timer injected with `timer=`.
Oracles are NumPy, written here."""
import json
import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.runtime.tuned_files import TunedFiles

ROOT = Path(__file__).resolve().parents[2]


def here() -> int:
    return sys._getframe(1).f_lineno


@ts.kernel
def axpy(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)],
         B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0 + ts.load_tile_like(y, z))


@ts.kernel
def matmul(c: ts.Mut[ts.f32, ("BM", "BN")], a: ts.Ref[ts.f32, ("M", "K")], b: ts.Ref[ts.f32, ("K", "N")],
           BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))              # tiles (BM, BK), (BK, BN)
    acc = ts.zeros((BM, BN), ts.f32)                                    # (BM, BN)
    for k in range(ts.num_tiles(pa, 1)):
        acc = ts.mma(pa.load((ts.block_id(0), k)), pb.load((k, ts.block_id(1))), acc)
    c.store(acc)


@ts.kernel(preconditions=["dim(x, 0) % B == 0"])
def divisible(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)


AXPY = [ts.Config(B=32), ts.Config(B=64, num_warps=2), ts.Config(tile=(128,), num_stages=2)]
AXPY_TILES = [(32,), (64,), (128,)]
MATMUL = [ts.Config(BM=16, BN=16, BK=16), ts.Config(BM=32, BN=16, BK=32, num_warps=8),
          ts.Config(tile=(16, 32), BK=16)]
MATMUL_TILES = [(16, 16), (32, 16), (16, 32)]


class FakeTimer:
    """Runs each candidate once (as the real timer's warm-up does) and reports a set time."""

    def __init__(self, times=None, check=None):
        self.times = times or {}
        self.check = check
        self.calls = []

    def __call__(self, config, run):
        run().sync()
        if self.check is not None:
            self.check()
        self.calls.append(config)
        return self.times.get(config, 5.0)


@pytest.fixture
def files(tmp_path):
    return TunedFiles(tmp_path / "committed", tmp_path / "user")


def tuned(kernel, configs, key, files, timer=None):
    k = ts.autotune(configs=configs, key=key, timer=timer)(kernel)
    k.files = files
    return k


def rand(rng, *shape):
    return rng.uniform(-3, 3, size=shape).astype(np.float32)


def poisoned(*shape):
    return ts.full(shape, np.nan)


def run_axpy(k, n, rng, **kwargs):
    x, y = rand(rng, n), rand(rng, n)
    z = poisoned(n)
    p = k(z, ts.tensor(x), ts.tensor(y), tile=ts.auto, **kwargs).sync()
    tile = p.tile
    assert p.unpartition() is z
    np.testing.assert_allclose(z.numpy(), x * 2 + y, rtol=1e-6)
    return tile


# --- every config computes the right result -------------------------------------------------------
@pytest.mark.parametrize("i", range(3))
def test_every_axpy_config_is_correct(backend, files, i):
    timer = FakeTimer({AXPY[i]: 1.0})
    k = tuned(axpy, AXPY, ["N"], files, timer)
    assert run_axpy(k, 300, np.random.default_rng(i)) == AXPY_TILES[i]
    assert timer.calls == AXPY                     # each candidate ran once, in order
    assert k.cache[(backend, "f32,f32,f32/N=512")].config == AXPY[i]


@pytest.mark.parametrize("i", range(3))
def test_every_matmul_config_is_correct(backend, files, i):
    rng = np.random.default_rng(10 + i)
    a, b = rand(rng, 40, 50), rand(rng, 50, 24)                         # ragged in every axis
    k = tuned(matmul, MATMUL, ["M", "N", "K"], files, FakeTimer({MATMUL[i]: 1.0}))
    c = poisoned(40, 24)
    p = k(c, ts.tensor(a), ts.tensor(b), tile=ts.auto).sync()
    assert p.tile == MATMUL_TILES[i] and p.unpartition() is c
    np.testing.assert_allclose(c.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert list(k.cache) == [(backend, "f32,f32,f32/M=64/N=32/K=64")]


# --- the cache per shape class --------------------------------------------------------------------
def test_one_shape_class_is_tuned_once_and_another_tunes_again(backend, files):
    timer = FakeTimer({AXPY[1]: 1.0})
    k = tuned(axpy, AXPY, ["N"], files, timer)
    rng = np.random.default_rng(1)
    run_axpy(k, 300, rng)
    assert len(timer.calls) == 3
    for n in (257, 300, 512):                      # the same class: N buckets to 512
        assert run_axpy(k, n, rng) == (64,)
    assert len(timer.calls) == 3
    run_axpy(k, 1000, rng)                         # N=1024: a new class
    assert len(timer.calls) == 6
    assert sorted(cls for _, cls in k.cache) == ["f32,f32,f32/N=1024", "f32,f32,f32/N=512"]


def test_a_custom_bucket_makes_every_size_its_own_class(files):
    timer = FakeTimer()
    k = ts.autotune(configs=AXPY, key=["N"], timer=timer, bucket=lambda n: n)(axpy)
    k.files = files
    rng = np.random.default_rng(2)
    with ts.backend("reference"):
        run_axpy(k, 300, rng)
        run_axpy(k, 301, rng)
    assert len(timer.calls) == 6 and {cls for _, cls in k.cache} == {"f32,f32,f32/N=300", "f32,f32,f32/N=301"}


def test_the_key_may_name_a_tensor_and_dtypes_are_always_part_of_the_class(files):
    k = tuned(axpy, AXPY, ["x"], files, FakeTimer())
    with ts.backend("reference"):
        run_axpy(k, 300, np.random.default_rng(3))
    assert list(k.cache) == [("reference", "f32,f32,f32/x=512")]


# --- timing ---------------------------------------------------------------------------------------
def test_timing_picks_the_fastest_on_scratch_outputs_and_saves_it(backend, files):
    rng = np.random.default_rng(4)
    x, y = rand(rng, 300), rand(rng, 300)
    z = poisoned(300)

    def callers_output_untouched():
        assert np.isnan(z.numpy()).all()           # timing runs write scratch copies, never z

    timer = FakeTimer({AXPY[0]: 3.0, AXPY[1]: 2.5, AXPY[2]: 0.75}, check=callers_output_untouched)
    k = tuned(axpy, AXPY, ["N"], files, timer)
    p = k(z, ts.tensor(x), ts.tensor(y), tile=ts.auto).sync()
    assert p.tile == (128,)
    np.testing.assert_allclose(p.unpartition().numpy(), x * 2 + y, rtol=1e-6)
    choice = k.cache[(backend, "f32,f32,f32/N=512")]
    assert (choice.config, choice.time_ms, choice.source) == (AXPY[2], 0.75, "tuned")
    saved = json.loads((files.user / f"{backend}.json").read_text())
    assert saved == {k.kernel_id: {"f32,f32,f32/N=512": {"tile": [128], "num_stages": 2, "time_ms": 0.75}}}


def test_a_config_that_fails_is_dropped_and_the_rest_still_compete(files):
    timer = FakeTimer({ts.Config(B=128): 0.1, ts.Config(B=32): 2.0})
    k = tuned(divisible, [ts.Config(B=128), ts.Config(B=64), ts.Config(B=32)], ["N"], files, timer)
    x = np.arange(320, dtype=np.float32) - 100.5      # 320 % 128 != 0: B=128 is refused
    with ts.backend("reference"):
        p = k(poisoned(320), ts.tensor(x), tile=ts.auto).sync()
    assert p.tile == (32,) and timer.calls == [ts.Config(B=64), ts.Config(B=32)]
    np.testing.assert_allclose(p.unpartition().numpy(), x + 1)


def test_cpu_backends_without_a_timer_take_the_first_config_that_compiles(backend, files):
    k = tuned(divisible, [ts.Config(B=128), ts.Config(B=64), ts.Config(B=32)], ["N"], files)
    x = np.arange(320, dtype=np.float32) * 0.5 - 7.25
    p = k(poisoned(320), ts.tensor(x), tile=ts.auto).sync()
    assert p.tile == (64,)
    np.testing.assert_allclose(p.unpartition().numpy(), x + 1)
    choice = k.cache[(backend, "f32,f32/N=512")]
    assert (choice.config, choice.time_ms, choice.source) == (ts.Config(B=64), None, "untimed")
    assert not files.user.exists()                 # an untimed choice is not a result worth saving


# --- the tuned files ------------------------------------------------------------------------------
def test_a_committed_table_skips_tuning(backend, files):
    k = tuned(axpy, AXPY, ["N"], files, FakeTimer())
    files.committed.mkdir()
    entry = {"B": 64, "num_warps": 2, "time_ms": 0.5}
    (files.committed / f"{backend}.json").write_text(json.dumps({k.kernel_id: {"f32,f32,f32/N=512": entry}}))
    assert run_axpy(k, 300, np.random.default_rng(5)) == (64,)
    assert k.timer.calls == []
    choice = k.cache[(backend, "f32,f32,f32/N=512")]
    assert (choice.config, choice.time_ms, choice.source) == (AXPY[1], 0.5, "committed")


def test_the_user_cache_serves_the_next_process_and_wins_over_the_committed_table(files):
    with ts.backend("reference"):
        first = tuned(axpy, AXPY, ["N"], files, FakeTimer({AXPY[1]: 1.0}))
        run_axpy(first, 300, np.random.default_rng(6))
        files.committed.mkdir()
        committed = {first.kernel_id: {"f32,f32,f32/N=512": {"B": 32}}}
        (files.committed / "reference.json").write_text(json.dumps(committed))
        second = tuned(axpy, AXPY, ["N"], files, FakeTimer())     # a fresh kernel object: an empty memory
        assert run_axpy(second, 400, np.random.default_rng(7)) == (64,)
    assert second.timer.calls == []
    assert second.cache[("reference", "f32,f32,f32/N=512")].source == "user cache"


CORRUPT = ["{not json", "[]", '{"K": 3}', '{"K": {"f32,f32,f32/N=512": 7}}',
           '{"K": {"f32,f32,f32/N=512": {"B": 48}}}',                       # stale: no longer a config
           '{"K": {"f32,f32,f32/N=512": {"B": 64, "num_warps": 16}}}',      # stale: hints changed
           '{"K": {"f32,f32,f32/N=512": {"tile": "wide"}}}']


@pytest.mark.parametrize("text", CORRUPT)
def test_a_corrupt_or_stale_file_is_a_miss_never_an_error(files, text):
    timer = FakeTimer({AXPY[0]: 1.0})
    k = tuned(axpy, AXPY, ["N"], files, timer)
    for folder in (files.committed, files.user):
        folder.mkdir()
        (folder / "reference.json").write_text(text.replace('"K"', json.dumps(k.kernel_id)))
    with ts.backend("reference"):
        assert run_axpy(k, 300, np.random.default_rng(8)) == (32,)
    assert len(timer.calls) == 3                   # tuned afresh
    saved = json.loads((files.user / "reference.json").read_text())   # and the user cache repaired
    assert saved[k.kernel_id]["f32,f32,f32/N=512"] == {"B": 32, "time_ms": 1.0}


def test_export_merges_the_user_cache_into_a_committable_table(files, tmp_path):
    with ts.backend("reference"):
        k = tuned(axpy, AXPY, ["N"], files, FakeTimer({AXPY[2]: 1.5}))
        run_axpy(k, 300, np.random.default_rng(9))
    target = tmp_path / "tuned" / "reference.json"
    target.parent.mkdir()
    target.write_text(json.dumps({"some.other.kernel": {"f16/N=64": {"B": 16}}}))
    assert files.export(target.parent, "reference") == target
    table = json.loads(target.read_text())
    assert table == {"some.other.kernel": {"f16/N=64": {"B": 16}},
                     k.kernel_id: {"f32,f32,f32/N=512": {"tile": [128], "num_stages": 2, "time_ms": 1.5}}}
    fresh = tuned(axpy, AXPY, ["N"], TunedFiles(target.parent, None), FakeTimer())   # a fresh machine
    with ts.backend("reference"):
        assert run_axpy(fresh, 500, np.random.default_rng(10)) == (128,)
    assert fresh.timer.calls == [] and ts.autotune.export.__doc__


# --- lending (S8) ---------------------------------------------------------------------------------
def test_the_auto_partitioned_output_is_lent_for_the_launch_and_given_back_by_unpartition(backend, files):
    k = tuned(axpy, AXPY, ["N"], files, FakeTimer({AXPY[1]: 1.0}))
    rng = np.random.default_rng(11)
    x, y = rand(rng, 200), rand(rng, 200)
    z = poisoned(200)
    fut = k(z, ts.tensor(x), ts.tensor(y), tile=ts.auto)
    with pytest.raises(ts.OwnershipError, match="lent to a partition"):
        z.numpy()
    with pytest.raises(ts.OwnershipError, match="lent to a partition") as info:
        k(z, ts.tensor(x), ts.tensor(y), tile=ts.auto)                 # lent: not even a second launch
    assert info.value.loc.line == here() - 1
    p = fut.sync()
    assert isinstance(p, ts.Partition) and p.tile == (64,) and p.grid == (4,)
    with pytest.raises(ts.OwnershipError):
        z.numpy()                                  # still lent after sync, until unpartition
    assert p.unpartition() is z
    np.testing.assert_allclose(z.numpy(), x * 2 + y, rtol=1e-6)


def test_a_refused_auto_launch_leaves_the_output_unlent_and_unwritten(files):
    k = tuned(axpy, AXPY, ["N"], files, FakeTimer())
    z = poisoned(100)
    with ts.backend("reference"):
        run_axpy(k, 100, np.random.default_rng(12))                    # the class is tuned: the cache serves it
        with pytest.raises(ts.LaunchError, match="has dtype f16, but the kernel declares f32"):
            k(z, ts.rand(100), ts.zeros(100, ts.f16), tile=ts.auto)
    assert np.isnan(z.numpy()).all()               # usable (not lent) and not written
    z.partition((32,)).unpartition()


def test_explicit_partitions_launch_the_plain_kernel_without_tuning(backend, files):
    timer = FakeTimer()
    k = tuned(axpy, AXPY, ["N"], files, timer)
    x, y = ts.rand(100, seed=1), ts.rand(100, seed=2)
    out = k(poisoned(100).partition((16,)), x, y).sync().unpartition()
    np.testing.assert_allclose(out.numpy(), x.numpy() * 2 + y.numpy(), rtol=1e-6)
    assert timer.calls == [] and k.cache == {}


# --- errors ---------------------------------------------------------------------------------------
def assert_error(e, line, fragment, help_fragment):
    text = str(e)
    assert fragment in e.message, e.message
    assert help_fragment in (e.help or ""), e.help
    assert text.startswith("error: ") and text.count("error:") == 1
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == line, text
    for internal in ("tilesafe/runtime", "Traceback", "Prepared", "Autotuned"):
        assert internal not in text


def test_a_config_tile_that_is_not_a_power_of_two_is_refused():
    with pytest.raises(ts.KernelError) as info:
        ts.Config(tile=(96,))
    assert_error(info.value, here() - 1, "tile entry 0 is 96, not a positive power of two", "use 128")
    with pytest.raises(ts.KernelError) as info:
        ts.autotune(configs=[ts.Config(B=64), ts.Config(B=96)], key=["N"])(axpy)
    assert_error(info.value, here() - 1, "Config(B=96) gives `z` a tile whose entry 0 is 96", "use 128")


def test_a_key_that_is_not_a_parameter_is_refused():
    with pytest.raises(ts.KernelError) as info:
        ts.autotune(configs=AXPY, key=["N", "Q"])(axpy)
    assert_error(info.value, here() - 1, "autotune key `Q` is not a parameter of `axpy`", "one of z, x, y, B, N")
    with pytest.raises(ts.KernelError) as info:
        ts.autotune(configs=AXPY, key=["B"])(axpy)
    assert_error(info.value, here() - 1, "key `B` of `axpy` is chosen by the configs", "key=['M', 'N', 'K']")


@pytest.mark.parametrize("config, fragment, help_fragment", [
    (ts.Config(N=64), "sets `N`, which is not a ts.Const parameter of `axpy`", "here: B"),
    (ts.Config(C=64), "sets `C`, which is not a parameter of `axpy`", "num_warps"),
    (ts.Config(B=2.0), "sets `B` = 2.0, but `B` is a ts.Const[int]", "of that type"),
    (ts.Config(num_warps=4), "does not fix the tile of `z`", "set B in the config"),
    (ts.Config(tile=(64, 64)), "gives `z` the tile (64, 64), but its tile has rank 1", "one size per axis"),
    (ts.Config(tile=(64,), B=32), "but axis 0 is 32 (`B`)", "agree"),
])
def test_configs_are_checked_against_the_kernel(config, fragment, help_fragment):
    with pytest.raises(ts.KernelError) as info:
        ts.autotune(configs=[config], key=["N"])(axpy)
    assert_error(info.value, here() - 1, fragment, help_fragment)


def test_bad_config_values_and_decorator_order_are_refused():
    with pytest.raises(ts.KernelError, match="num_warps=3 must be a power of two"):
        ts.Config(B=64, num_warps=3)
    with pytest.raises(ts.KernelError, match="is not a compile-time value"):
        ts.Config(B=[64])
    with pytest.raises(ts.KernelError, match="non-empty list of configs"):
        ts.autotune(configs=[], key=["N"])(axpy)
    with pytest.raises(ts.KernelError, match="configs\\[0\\] is dict, not a ts.Config"):
        ts.autotune(configs=[{"B": 64}], key=["N"])(axpy)
    with pytest.raises(ts.KernelError, match="must be applied to a @ts.kernel") as info:
        ts.autotune(configs=AXPY, key=["N"])(axpy.fn)
    assert "above @ts.kernel" in info.value.help


def test_ts_auto_on_a_kernel_that_is_not_autotuned_is_refused():
    z = poisoned(64)
    with pytest.raises(ts.LaunchError) as info:
        axpy(z, ts.rand(64), ts.rand(64), tile=ts.auto)
    assert_error(info.value, here() - 1, "`axpy` is not autotuned, so tile=ts.auto has no tuned tile",
                 "@ts.autotune(configs=")
    assert np.isnan(z.numpy()).all()


def test_configs_that_all_fail_are_one_error_listing_each(backend, files):
    k = tuned(divisible, [ts.Config(B=128), ts.Config(B=256)], ["N"], files)
    z = poisoned(320)
    with pytest.raises(ts.LaunchError) as info:
        k(z, ts.rand(320), tile=ts.auto)
    assert_error(info.value, here() - 1, "none of the 2 configs of `divisible` runs for shape class f32,f32/N=512",
                 "add a config that fits these shapes")
    assert "Config(B=128): precondition `dim(x, 0) % B == 0`" in info.value.message
    assert "B = 256" in info.value.message
    assert np.isnan(z.numpy()).all() and k.cache == {}


def test_misused_auto_launches_are_refused(files):
    k = tuned(axpy, AXPY, ["N"], files, FakeTimer())
    x, y = ts.rand(64), ts.rand(64)
    cases = [
        (lambda: k(poisoned(64).partition((32,)), x, y, tile=ts.auto),
         "output `z` of `axpy` must be a tilesafe tensor when tile=ts.auto, got Partition", "the launcher partitions"),
        (lambda: k(poisoned(64), x, y, B=32, tile=ts.auto),
         "`B` of `axpy` is chosen by the autotuner when tile=ts.auto", "drop B="),
        (lambda: k(poisoned(64), x, y, tile=(32,)), "tile= of `axpy` takes ts.auto", "tile=ts.auto"),
        (lambda: k(poisoned(64), x, y, tile=ts.auto, schedule=ts.schedule(num_warps=4)),
         "the configs of `axpy` choose the schedule", "drop schedule="),
    ]
    with ts.backend("reference"):
        for launch, fragment, help_fragment in cases:
            with pytest.raises(ts.LaunchError) as info:
                launch()
            assert fragment in info.value.message and help_fragment in info.value.help
            assert info.value.loc.file == __file__
    assert k.timer.calls == []


# --- the documentation ----------------------------------------------------------------------------
DOC = ROOT / "docs" / "autotune.md"


@pytest.mark.parametrize("i", range(len(re.findall(r"```python\n", DOC.read_text()))))
def test_doc_example_runs(i, tmp_path, monkeypatch):
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[i]
    script = tmp_path / f"autotune_doc_{i}.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    with ts.backend("reference"):
        runpy.run_path(str(script), run_name="autotune_doc")


# --- several outputs, persistent kernels ----------------------------------------------------------
@ts.kernel
def split(lo: ts.Mut[ts.f32, ("B",)], hi: ts.Mut[ts.f32, ("C",)], x: ts.Ref[ts.f32, ("N",)],
          B: ts.Const[int], C: ts.Const[int], N: int):
    lo.store(ts.minimum(ts.load_tile_like(x, lo), 0.0))
    hi.store(ts.maximum(ts.load(x, (ts.block_id(0),), shape=(C,)), 0.0))


@ts.kernel
def copy_tiles(z: ts.MutTiles[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")],
               BM: ts.Const[int], BN: ts.Const[int], M: int, N: int):
    for idx in z.tiles(group=2):
        z.store(ts.load(x, idx, shape=z.tile_shape) * 3.0, idx)        # (BM, BN)


@pytest.mark.parametrize("config, tiles", [
    (ts.Config(B=32, C=32), ((32,), (32,))),
    (ts.Config(tile={"lo": (64,), "hi": (64,)}), ((64,), (64,))),
])
def test_each_output_gets_its_tile(backend, files, config, tiles):
    k = tuned(split, [config], ["N"], files, FakeTimer())
    x = rand(np.random.default_rng(13), 200)
    lo, hi = k(poisoned(200), poisoned(200), ts.tensor(x), tile=ts.auto).sync()
    assert (lo.tile, hi.tile) == tiles
    np.testing.assert_array_equal(lo.unpartition().numpy(), np.minimum(x, 0))
    np.testing.assert_array_equal(hi.unpartition().numpy(), np.maximum(x, 0))


def test_a_persistent_kernel_is_tuned_and_takes_a_grid(backend, files):
    configs = [ts.Config(BM=16, BN=32), ts.Config(BM=32, BN=16, num_warps=2)]
    k = tuned(copy_tiles, configs, ["M", "N"], files, FakeTimer({configs[1]: 1.0}))
    x = rand(np.random.default_rng(14), 50, 70)
    p = k.launch(poisoned(50, 70), ts.tensor(x), grid=(2,), tile=ts.auto).sync()
    assert p.tile == (32, 16)
    np.testing.assert_allclose(p.unpartition().numpy(), x * 3, rtol=1e-6)
    assert list(k.cache) == [(backend, "f32,f32/M=64/N=128")]


# --- on the GPU (pytest -m gpu): the real CUDA-event timer ------------------------------------------
@pytest.mark.gpu
def test_the_cuda_timer_tunes_on_scratch_and_saves_the_winner(files):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    k = tuned(axpy, AXPY, ["N"], files)                # no timer: CUDA events on the triton backend
    rng = np.random.default_rng(15)
    x, y = rand(rng, 1 << 20), rand(rng, 1 << 20)
    z = poisoned(1 << 20)
    with ts.backend("triton"):
        p = k(z, ts.tensor(x), ts.tensor(y), tile=ts.auto).sync()
    assert p.tile in AXPY_TILES
    np.testing.assert_allclose(p.unpartition().numpy(), x * 2 + y, rtol=1e-6)
    (choice,) = k.cache.values()
    assert choice.source == "tuned" and choice.time_ms > 0
    (device,) = [f.stem for f in files.user.glob("*.json")]
    assert device == torch.cuda.get_device_name().lower().replace(" ", "-")


def test_configs_carry_every_schedule_hint_through_json():
    c = ts.Config(BM=64, num_warps=8, tma=False, reverse_blocks=(1,))
    assert c.schedule == ts.schedule(num_warps=8, tma=False, reverse_blocks=(1,))
    assert c.to_json() == {"BM": 64, "num_warps": 8, "tma": False, "reverse_blocks": [1]}
    assert ts.Config(**c.to_json()) == c                              # the tuned files' round trip
    assert "reverse_blocks=[1]" in repr(c) and c.schedule.options() == {"num_warps": 8}   # Triton's own only
