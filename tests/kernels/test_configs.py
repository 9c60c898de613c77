"""The config table: shape classes, lookups, overrides, the committed tuned tables, tune()."""
import importlib
import json

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels import configs


def test_bucket_and_shape_class():
    assert [configs.bucket(n) for n in (1, 16, 17, 2560, 10 ** 9)] == [16, 16, 32, 4096, 1 << 16]
    assert configs.shape_class(ts.bf16, 1, 2560, 9728) == "bf16/16/4096/16384"


def test_cpu_backends_use_small_defaults_and_overrides():
    with ts.backend("reference"):
        assert configs.lookup("matmul", "f32/64/64/64") == configs.CPU_DEFAULTS["matmul"]
        assert configs.lookup("matmul", "f32/64/64/64", {"block_m": 64})["block_m"] == 64
        with pytest.raises(ts.LaunchError, match=r"config keys \['blockm'\] are not used by matmul"):
            configs.lookup("matmul", "f32/64/64/64", {"blockm": 64})
        with pytest.raises(ts.LaunchError, match="no kernel family"):
            configs.lookup("conv", "f32")


@pytest.mark.parametrize("key, value", [("block_n", 0), ("block_k", -64), ("block_m", 16.0), ("split_k", 0),
                                        ("block_n", True), ("min_blocks", "264")])
def test_config_sizes_must_be_positive_ints(key, value):
    with ts.backend("reference"):
        with pytest.raises(ts.LaunchError, match=f"config {key}={value!r} is not a positive int") as err:
            tk.linear(torch.ones(1, 64), torch.ones(40, 64), config={key: value})
        assert err.value.loc is not None and err.value.loc.file == __file__      # points at the call
        assert configs.lookup("linear", "f32/16/64", {"split_k": None})["split_k"] is None   # None: automatic


@pytest.mark.parametrize("family, key, value", [("linear", "prefetch", 1), ("matmul", "tail_split", "yes"),
                                                ("rows", "reverse_pass", None), ("attention", "flat", 0),
                                                ("matmul", "persistent", "auto")])
def test_config_switches_must_be_bools(family, key, value):
    with ts.backend("reference"):
        with pytest.raises(ts.LaunchError, match=f"config {key}={value!r} is not True or False") as err:
            configs.lookup(family, "f32/64", {key: value})
        assert err.value.loc is not None and err.value.loc.file == __file__      # points at the caller
        assert configs.lookup("matmul", "f32/64/64/64", {"persistent": None})["persistent"] is None


def test_every_family_has_the_same_keys_on_cpu_and_gpu():
    assert set(configs.CPU_DEFAULTS) == set(configs.GPU_DEFAULTS)
    for family, cpu in configs.CPU_DEFAULTS.items():
        gpu = configs.GPU_DEFAULTS[family]
        assert set(cpu) <= set(gpu), family
        assert set(gpu) - set(cpu) <= {"num_warps", "num_stages", "tma", "target_blocks"}, family   # GPU-only hints


def test_tuned_tables_are_valid_json_for_known_families():
    for path in configs.TUNED_DIR.glob("*.json"):
        table = json.loads(path.read_text())
        for family, entries in table.items():
            assert family in configs.GPU_DEFAULTS, (path, family)
            for key, cfg in entries.items():
                assert set(cfg) - {"time_ms"} <= set(configs.GPU_DEFAULTS[family]) | configs.SCHEDULE_KEYS, (path, family, key)


def test_tuned_table_of_an_unknown_gpu_is_empty():
    assert configs.tuned_table("no-such-gpu") == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_tune_needs_a_gpu():
    with pytest.raises(ts.LaunchError, match="tune\\(\\) times kernels on a GPU"):
        configs.tune("matmul", "bf16/16/16/16", lambda cfg: None, [{}])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tune_writes_the_fastest_config(tmp_path):
    import tilesafe.kernels as tk
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    path = tmp_path / "gpu.json"
    cands = [{"block_m": 64, "block_n": 64}, {"block_m": 128, "block_n": 128}]
    with ts.backend("triton"):
        best = configs.tune("matmul", configs.shape_class(ts.bf16, 256, 256, 256),
                            lambda c: tk.matmul(a, a, out=out, config=c), cands, reps=3, path=path)
    assert best in cands
    assert json.loads(path.read_text())["matmul"]["bf16/256/256/256"]["block_m"] == best["block_m"]


def test_a_tuple_of_shape_classes_takes_the_first_one_tuned(monkeypatch):
    table = {"linear": {"bf16/4096/16384/gemv": {"block_n": 16, "split_k": 4}, "bf16/4096/16384": {"block_n": 64}}}
    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    monkeypatch.setattr(configs, "gpu_name", lambda: "test-gpu")
    monkeypatch.setattr(configs, "tuned_table", lambda gpu: table)
    mm = importlib.import_module("tilesafe.kernels.matmul")
    one_row = configs.lookup("linear", mm.linear_keys(ts.bf16, 1, 2560, 9728))
    rows16 = configs.lookup("linear", mm.linear_keys(ts.bf16, 16, 2560, 9728))
    assert (one_row["block_n"], one_row["split_k"]) == (16, 4)
    assert (rows16["block_n"], rows16["split_k"]) == (64, None)          # its own class, default split
    table["linear"].pop("bf16/4096/16384/gemv")
    assert configs.lookup("linear", mm.linear_keys(ts.bf16, 1, 2560, 9728))["block_n"] == 64   # falls back


def test_a_weights_own_class_comes_before_its_bucket(monkeypatch):
    table = {"linear": {"bf16/2560x9728/gemv": {"block_n": 4}, "bf16/4096/16384/gemv": {"block_n": 16},
                        "bf16/2560x9728": {"block_n": 32}, "bf16/4096/16384": {"block_n": 64}},
             "matmul": {"bf16/128/2560x4096": {"block_m": 64}, "bf16/128/4096/4096": {"block_m": 128}}}
    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    monkeypatch.setattr(configs, "tuned_table", lambda gpu: table)
    mm = importlib.import_module("tilesafe.kernels.matmul")
    assert configs.weight_class(ts.bf16, (100,), (2560, 4096)) == "bf16/128/2560x4096"   # M bucketed, N and K exact
    assert configs.lookup("linear", mm.linear_keys(ts.bf16, 1, 2560, 9728))["block_n"] == 4
    assert configs.lookup("linear", mm.linear_keys(ts.bf16, 1, 4096, 12288))["block_n"] == 16   # its bucket
    assert configs.lookup("linear", mm.linear_keys(ts.bf16, 8, 2560, 9728))["block_n"] == 32
    assert configs.lookup("linear", mm.linear_keys(ts.bf16, 8, 4096, 12288))["block_n"] == 64
    assert configs.lookup("matmul", mm.matmul_keys(ts.bf16, 128, 2560, 4096))["block_m"] == 64
    assert configs.lookup("matmul", mm.matmul_keys(ts.bf16, 100, 4096, 4096))["block_m"] == 128
    table["linear"].pop("bf16/2560x9728/gemv")
    assert configs.lookup("linear", mm.linear_keys(ts.bf16, 1, 2560, 9728))["block_n"] == 16   # GEMV's first


def test_a_config_schedule_is_made_once_and_takes_json_lists():
    from tilesafe.kernels.launch import schedule_of
    a = schedule_of({"block_m": 64, "num_warps": 8, "reverse_blocks": [1]})      # as a tuned JSON file holds it
    assert a == ts.schedule(num_warps=8, reverse_blocks=(1,))
    assert schedule_of({"num_warps": 8, "reverse_blocks": (1,)}) is a             # cached: no rebuild per call
    assert schedule_of({"block_m": 64, "tma": None}) is None
