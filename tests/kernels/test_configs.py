"""The config table: shape classes, lookups, overrides, the committed tuned tables, tune()."""
import json

import pytest
import torch

import tilesafe as ts
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


def test_every_family_has_the_same_keys_on_cpu_and_gpu():
    assert set(configs.CPU_DEFAULTS) == set(configs.GPU_DEFAULTS)
    for family, cpu in configs.CPU_DEFAULTS.items():
        gpu = configs.GPU_DEFAULTS[family]
        assert set(cpu) <= set(gpu), family
        assert set(gpu) - set(cpu) <= {"num_warps", "num_stages", "target_blocks"}, family


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
