"""The config model: valid configs for every shape, correct results with them on the CPU
backends, predictions that move the right way, the tuned table as refinements of exact
shapes only, and the first-use autotune's choice and cache."""
import importlib
import json
import random

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn
from tilesafe.kernels import config_model as cm
from tilesafe.kernels import configs, first_use
from tilesafe.kernels import gemm_model as gm

mm = importlib.import_module("tilesafe.kernels.matmul")
HIDDEN = (777, 896, 1000, 1536, 2304, 3072, 3584, 4544, 5000, 11008, 14336, 50257)


def random_shapes(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        yield cm.Gemm(rng.choice((1, 2, 7, 16, 17, 100, 777, 2049, 16384)), rng.choice(HIDDEN), rng.choice(HIDDEN),
                      rng.choice(("bf16", "f16", "f32")))
        sq = rng.choice((1, 17, 300, 777, 4096))
        hkv = rng.choice((1, 2, 4, 8))
        yield cm.Attention(rng.choice((1, 2)), hkv * rng.choice((1, 4, 5, 8)), hkv, sq, sq + rng.choice((0, 33)),
                           rng.choice((64, 128)), rng.random() < 0.5)
        yield cm.Decode(hkv * rng.choice((1, 4, 5, 8)), hkv, rng.choice((16, 700, 4096, 32768)), rng.choice((64, 128)))


def test_every_candidate_is_a_valid_config_the_lookup_accepts():
    for shape in random_shapes(0, 60):
        ranked = cm.candidates(shape)
        assert ranked, shape
        for cfg in ranked[:8] + ranked[-2:]:
            assert cm.valid(shape, cfg), (shape, cfg)
            assert set(cfg) <= set(configs.GPU_DEFAULTS[shape.family]) | configs.SCHEDULE_KEYS
            with ts.backend("reference"):           # the override checks: positive ints, bools
                configs.lookup(shape.family, "?", cfg)
        best = cm.choose(shape)
        assert best == ranked[0]
        if (rule := gm.streaming_choice(shape, cm.H200)) is not None:    # 16 < m <= 128: the measured rule
            assert best == rule and cm.valid(shape, rule)
        else:
            assert cm.predict_us(shape, best) <= min(cm.predict_us(shape, c) for c in ranked)


def test_tensor_core_tiles_are_powers_of_two_of_at_least_16():
    for shape in random_shapes(1, 40):
        for cfg in cm.candidates(shape):
            keys = ("block_m", "block_n", "block_k") if shape.family == "matmul" else \
                ("block_m", "block_n") if shape.family == "attention" else ()
            for key in keys:
                assert cfg[key] >= 16 and cfg[key] & (cfg[key] - 1) == 0, (shape, cfg)
    assert not cm.valid(cm.Gemm(100, 256, 256), dict(cm.choose(cm.Gemm(100, 256, 256)), block_m=96))
    assert not cm.valid(cm.Gemm(100, 256, 256), dict(cm.choose(cm.Gemm(100, 256, 256)), num_stages=20))


@pytest.mark.parametrize("m, n, k", [(40, 48, 70), (3, 100, 96), (1, 90, 130), (40, 48, 600), (3, 100, 1200),
                                     (1, 90, 1100)])
def test_model_configs_compute_the_product(backend, device, m, n, k):
    a, w = randn((m, k), "f32", 1, device), randn((n, k), "f32", 2, device)
    ranked = cm.candidates(cm.Gemm(m, n, k, "f32"))
    split = [c for c in ranked if c["split_k"] > 1][:1]     # the split-K path, where the model has one
    for cfg in cm.ranked(cm.Gemm(m, n, k, "f32"), 2) + split:
        out = poisoned((m, n), "f32", device)
        got = tk.linear(a, w, out=out, config=cfg)
        assert_close(got, torch.as_tensor(f64(a)) @ torch.as_tensor(f64(w)).T, "f32", rtol=1e-4, atol=1e-4)


def test_model_configs_compute_attention(backend, device):
    q, k, v = (randn((1, 4, 20, 16), "f32", s, device) for s in (1, 2, 3))
    k, v = k[:, :2], v[:, :2]
    cfg = cm.choose(cm.Attention(1, 4, 2, 20, 20, 16, True, "f32"))
    out = tk.flash_attention(q, k, v, causal=True, config=cfg)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.as_tensor(f64(t)) for t in (q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))), is_causal=True)
    assert_close(out, want, "f32", rtol=1e-4, atol=1e-4)


def test_predictions_grow_with_the_work_and_shrink_with_the_machine():
    gemm = cm.choose(cm.Gemm(1000, 3000, 3000))
    for small, big in [((1000, 3000, 3000), (1000, 3000, 6000)), ((1000, 3000, 3000), (2000, 3000, 3000)),
                       ((1000, 3000, 3000), (1000, 6000, 3000)), ((300, 3000, 3000), (301, 3000, 3000))]:
        assert cm.predict_us(cm.Gemm(*small), gemm) <= cm.predict_us(cm.Gemm(*big), gemm)
    gemv = cm.choose(cm.Gemm(1, 4096, 4096))
    assert cm.predict_us(cm.Gemm(1, 4096, 4096), gemv) < cm.predict_us(cm.Gemm(1, 8192, 4096), gemv)
    fast = cm.Gpu(hbm_bytes_per_s=2 * cm.H200.hbm_bytes_per_s)
    assert cm.predict_us(cm.Gemm(1, 4096, 4096), gemv, fast) < cm.predict_us(cm.Gemm(1, 4096, 4096), gemv)
    more = cm.Gpu(flops=2 * cm.H200.flops)
    big = cm.Gemm(8192, 8192, 8192)
    assert cm.predict_us(big, cm.choose(big), more) < cm.predict_us(big, cm.choose(big))
    fa = cm.choose(cm.Attention(1, 32, 8, 2048, 2048, 128))
    assert cm.predict_us(cm.Attention(1, 32, 8, 2048, 2048, 128), fa) < \
        cm.predict_us(cm.Attention(1, 32, 8, 2048, 4096, 128), fa)
    assert cm.predict_us(cm.Attention(1, 32, 8, 2048, 2048, 128, True), fa) < \
        cm.predict_us(cm.Attention(1, 32, 8, 2048, 2048, 128), fa)
    dec = cm.choose(cm.Decode(32, 8, 8192, 128))
    assert cm.predict_us(cm.Decode(32, 8, 4096, 128), dec) < cm.predict_us(cm.Decode(32, 8, 32768, 128), dec)


def test_a_partly_full_last_wave_is_named():
    # 1 x 133 tiles of 128 x 256 on 132 SMs: two rounds for one tile's work more than one
    shape = cm.Gemm(128, 133 * 256, 8192)
    cfg = dict(cm.choose(shape), block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, split_k=1,
               persistent=False, tail_split=False)
    assert cm.explain(shape, cfg)["limit"] == "wave quantisation"
    assert cm.explain(cm.Gemm(1, 8192, 8192), cm.choose(cm.Gemm(1, 8192, 8192)))["limit"] == "bandwidth"


def _on_gpu(monkeypatch, table=None):
    """The lookup's GPU branch on this CPU: the H200's table (or `table`), no device."""
    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    monkeypatch.setattr(configs, "gpu_name", lambda: "nvidia-h200")
    monkeypatch.setattr(configs, "_device_target", lambda: None)
    if table is not None:
        monkeypatch.setattr(configs, "tuned_table", lambda gpu: table)


def test_tuned_entries_refine_only_the_shapes_they_were_made_for(monkeypatch):
    table = {"matmul": {"bf16/1024/3072x1536": {"block_m": 32}, "bf16/1024/4096/2048": {"block_m": 16}}}
    _on_gpu(monkeypatch, table)
    own = mm.matmul_keys(ts.bf16, 1024, 3072, 1536)
    assert configs.lookup("matmul", own, shape=cm.Gemm(1024, 3072, 1536))["block_m"] == 32   # the weight's own
    keys = mm.matmul_keys(ts.bf16, 777, 3072, 1536)
    # the same weight at another M of the bucket: the model (the entry was timed at M = 1024)
    assert configs.lookup("matmul", keys, shape=cm.Gemm(777, 3072, 1536)) == \
        dict(configs.GPU_DEFAULTS["matmul"], **cm.choose(cm.Gemm(777, 3072, 1536)))
    table["matmul"].pop("bf16/1024/3072x1536")
    assert configs.lookup("matmul", keys)["block_m"] == 16                   # no shape: the bucket, as before
    model = configs.lookup("matmul", keys, shape=cm.Gemm(777, 3072, 1536))    # a bucket that only contains it
    assert model == dict(configs.GPU_DEFAULTS["matmul"], **cm.choose(cm.Gemm(777, 3072, 1536)))
    exact = mm.matmul_keys(ts.bf16, 1024, 4096, 2048)
    assert configs.lookup("matmul", exact, shape=cm.Gemm(1024, 4096, 2048))["block_m"] == 16   # its own sizes


def test_the_tuned_benchmark_shapes_keep_their_configs(monkeypatch):
    """Every GEMM and GEMV of the committed benchmark that the table has an entry for gets that
    entry, with or without the model (the 50 tuned shapes keep their speed)."""
    from tilesafe.bench.families.qwen3 import MODELS
    _on_gpu(monkeypatch)
    shapes = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)]
    shapes += [(m, n, k) for m in (1, 16, 128, 2048) for name in ("4B", "8B", "32B")
               for n, k in MODELS[name].projections().values()]
    for m, n, k in shapes:
        family, keys = ("linear", mm.linear_keys(ts.bf16, m, n, k)) if m <= 16 else \
            ("matmul", mm.matmul_keys(ts.bf16, m, n, k))
        assert configs.lookup(family, keys, dtype=ts.bf16, shape=cm.Gemm(m, n, k)) == \
            configs.lookup(family, keys, dtype=ts.bf16), (m, n, k)
    for s in (1024, 4096, 16384):                          # the flash and decode workloads too
        for causal in (False, True):
            key = configs.shape_class(ts.bf16, 128, s)
            assert configs.lookup("attention", key, dtype=ts.bf16, shape=cm.Attention(1, 32, 32, s, s, 128, causal)) \
                == configs.lookup("attention", key, dtype=ts.bf16)
    for heads, kv in ((32, 8), (64, 8)):
        key = configs.shape_class(ts.bf16, 128, heads // kv)
        assert configs.lookup("decode", key, dtype=ts.bf16, shape=cm.Decode(heads, kv, 32768, 128)) == \
            configs.lookup("decode", key, dtype=ts.bf16)


def test_the_issues_held_out_shape_gets_the_model_not_the_defaults(monkeypatch):
    _on_gpu(monkeypatch)
    keys = mm.matmul_keys(ts.bf16, 777, 3072, 1536)
    got = configs.lookup("matmul", keys, dtype=ts.bf16, shape=cm.Gemm(777, 3072, 1536))
    assert got != configs.lookup("matmul", keys, dtype=ts.bf16)
    assert cm.predict_us(cm.Gemm(777, 3072, 1536), got) < \
        cm.predict_us(cm.Gemm(777, 3072, 1536), configs.GPU_DEFAULTS["matmul"])


def test_amd_targets_keep_their_defaults(monkeypatch):
    from tilesafe.backends.triton import targets
    _on_gpu(monkeypatch)
    with targets.compiling_for("gfx942"):
        keys = mm.matmul_keys(ts.bf16, 777, 3072, 1536)
        assert configs.lookup("matmul", keys, dtype=ts.bf16, shape=cm.Gemm(777, 3072, 1536)) == \
            configs.lookup("matmul", keys, dtype=ts.bf16)


def test_first_use_tuning_keeps_the_fastest_and_caches_it(tmp_path, monkeypatch):
    from tilesafe.settings import Settings
    monkeypatch.setattr(first_use, "SETTINGS", Settings.from_env({"TILESAFE_CACHE_DIR": str(tmp_path)}))
    first_use.forget()
    cands = cm.ranked(cm.Gemm(777, 3072, 1536), 4)
    assert len(cands) == 4 and len({json.dumps(c, sort_keys=True) for c in cands}) == 4
    ran = []

    def timer(cfg, run):
        run()
        if cfg is cands[0]:
            raise RuntimeError("does not compile")             # a failing candidate is dropped
        return {1: 3.0, 2: 1.0, 3: 2.0}[cands.index(cfg)]
    best = first_use.pick("matmul", "bf16/1024/3072x1536", cands, ran.append, "test-gpu", timer)
    assert best is cands[2] and ran == cands
    saved = json.loads((tmp_path / "library" / "test-gpu.json").read_text())["matmul"]["bf16/1024/3072x1536"]
    assert saved == dict(cands[2], time_ms=1.0)

    def no_timing(cfg, run):
        raise AssertionError("timed again")
    assert first_use.pick("matmul", "bf16/1024/3072x1536", cands, ran.append, "test-gpu", no_timing) is cands[2]
    first_use.forget()                                          # a new process: read from disk
    assert first_use.pick("matmul", "bf16/1024/3072x1536", cands, ran.append, "test-gpu", no_timing) == cands[2]
    first_use.forget()


def test_first_use_tuning_is_opt_in_and_never_on_a_cpu_backend():
    assert not first_use.wanted()
    with first_use.first_use_tuning(), ts.backend("reference"):
        assert not first_use.wanted()


@pytest.mark.parametrize("call", ["linear", "matmul", "flash"])
def test_first_use_tuning_inside_a_call_times_candidates_and_returns_the_right_result(monkeypatch, tmp_path, call):
    """The whole path on a CPU backend, the lookup made to take its GPU branch: the call times
    the model's candidates by running itself with each (on the caller's own tensors, `out=`
    included), keeps one, and its result is still the product."""
    from tilesafe.settings import Settings
    _on_gpu(monkeypatch)
    monkeypatch.setattr(configs, "gpu_name", lambda: "test-gpu")
    monkeypatch.setattr(first_use, "SETTINGS", Settings.from_env({"TILESAFE_CACHE_DIR": str(tmp_path)}))
    monkeypatch.setattr(first_use, "wanted", lambda: True)
    timed = []

    def fake_time(run, cand, timer):
        run(cand)
        timed.append(cand)
        return float(len(timed))                      # the first candidate is the fastest
    monkeypatch.setattr(first_use, "_time", fake_time)
    first_use.forget()
    with ts.backend("reference"):
        if call == "flash":
            q, k, v = (randn((1, 2, 24, 16), "f32", s) for s in (1, 2, 3))
            out = poisoned((1, 2, 24, 16), "f32")
            got = tk.flash_attention(q, k, v, out=out)
            want = torch.nn.functional.scaled_dot_product_attention(*(torch.as_tensor(f64(t)) for t in (q, k, v)))
        else:
            x, w = randn((20, 40), "f32", 1), randn((24, 40), "f32", 2)
            out = poisoned((20, 24), "f32")
            got = tk.linear(x, w, out=out) if call == "linear" else tk.matmul(x, w.T, out=out)
            want = torch.as_tensor(f64(x)) @ torch.as_tensor(f64(w)).T
    assert got is out and 1 <= len(timed) <= first_use.CANDIDATES
    assert_close(got, want, "f32", rtol=1e-4, atol=1e-4)
    assert list(json.loads((tmp_path / "library" / "test-gpu.json").read_text())) == \
        ["attention" if call == "flash" else "matmul"]
    first_use.forget()


def test_the_model_ranks_the_tuners_measured_candidates_well():
    """A ratchet on the fit (benchmarks/config_model_fit.py): over the H200 tuner's timed
    candidates of the training shapes, the model's first pick is within a few percent of the
    measured best (geomean), and the best of its first four kinds closer still."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "config_model_fit", Path(__file__).resolve().parents[2] / "benchmarks" / "config_model_fit.py")
    fit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit)
    rows: dict = {}
    for family, shape, timed in fit.classes():
        rows.setdefault(family, []).append(fit.picks(shape, timed))
    geo = {f: [fit.geomean([r[i] for r in rs if r[i] is not None]) for i in (0, 1)] for f, rs in rows.items()}
    assert len(rows["matmul"]) >= 25 and len(rows["linear"]) >= 15
    assert geo["matmul"][0] >= 0.96 and geo["matmul"][1] >= 0.97, geo
    assert geo["linear"][0] >= 0.90 and geo["linear"][1] >= 0.94, geo

